"""What each training job is and how to read it: pure data and functions, no I/O, cheap to import."""

from __future__ import annotations

from airflow_provider_training.kinds.base import (
    BATCH_JOBS,
    CONFIGMAPS,
    EVENTS,
    PODS,
    REPLICASETS,
    SERVICES,
    ChildObjects,
    ChildResource,
    JobKind,
    JobState,
    JobStatus,
    RawObject,
    ReplicaCounts,
    ReplicaFailure,
    ReplicaPod,
    ResourceRef,
    parse_time,
)
from airflow_provider_training.kinds.registry import all_kinds, get_kind

__all__ = [
    "BATCH_JOBS",
    "CONFIGMAPS",
    "EVENTS",
    "PODS",
    "REPLICASETS",
    "SERVICES",
    "ChildObjects",
    "ChildResource",
    "JobKind",
    "JobState",
    "JobStatus",
    "RawObject",
    "ReplicaCounts",
    "ReplicaFailure",
    "ReplicaPod",
    "ResourceRef",
    "all_kinds",
    "get_kind",
    "parse_time",
]

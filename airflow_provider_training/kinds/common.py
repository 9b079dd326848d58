"""Pure helpers every kind module shares: conditions, replica counts, the no-status grace period, pod labels.

Nothing here knows a particular API; ``kubeflow.py`` and the other family modules build on these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pendulum

from airflow_provider_training.kinds.base import JobState, JobStatus, RawObject, ReplicaCounts, parse_time

STATUS_GRACE_SECONDS = 60
"""How long a new job may have no status before we say its operator seems not to be running."""

OPERATOR_NOT_RUNNING = "OperatorNotRunning"
"""``JobStatus.reason`` of a job whose status stayed empty past the grace period."""


def true_condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` whose ``status`` is the string ``"True"`` (the last one if repeated).

    Matches by type and status only: never by truthiness and never by position in the list.
    """
    found = None
    for condition in conditions:
        if condition.get("type") == type_ and condition.get("status") == "True":
            found = condition
    return found


def first_true_condition(
    conditions: Iterable[Mapping[str, Any]], precedence: Iterable[str]
) -> Mapping[str, Any] | None:
    """The true condition whose type comes first in ``precedence`` (e.g. Failed before Succeeded)."""
    conditions = list(conditions)
    for type_ in precedence:
        condition = true_condition(conditions, type_)
        if condition is not None:
            return condition
    return None


def replica_counts(
    desired: Mapping[str, int | None], statuses: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, ReplicaCounts]:
    """Counts per replica type: ``desired`` from the spec, active/succeeded/failed from the status.

    Types appear in spec order, then any type only the status knows.
    """
    statuses = statuses or {}
    counts: dict[str, ReplicaCounts] = {}
    for type_ in [*desired, *(t for t in statuses if t not in desired)]:
        observed = statuses.get(type_) or {}
        counts[type_] = ReplicaCounts(
            desired=desired.get(type_),
            active=int(observed.get("active") or 0),
            succeeded=int(observed.get("succeeded") or 0),
            failed=int(observed.get("failed") or 0),
        )
    return counts


def pending_without_status(
    job: RawObject,
    *,
    causes: str,
    replicas: Mapping[str, ReplicaCounts] | None = None,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
    missing: str = "no status",
) -> JobStatus:
    """PENDING for a job that has no status yet; ``stalled`` once ``grace_seconds`` passed since creation.

    ``causes`` says why a status may stay empty for this kind (e.g. "the training operator is not running").
    ``missing`` names what is missing, for kinds whose status lives elsewhere (e.g. "no trainer Job").
    """
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    now = now or pendulum.now("UTC")
    if created is None or (now - created).total_seconds() < grace_seconds:
        return JobStatus(JobState.PENDING, replicas=dict(replicas or {}))
    name = (job.get("metadata") or {}).get("name", "")
    age = int((now - created).total_seconds())
    message = f"{job.get('kind', 'job')} {name} has {missing} {age}s after creation: {causes}"
    return JobStatus(
        JobState.PENDING,
        reason=OPERATOR_NOT_RUNNING,
        message=message,
        replicas=dict(replicas or {}),
        stalled=True,
    )


def label_selector(labels: Mapping[str, str]) -> str:
    """``k=v,k=v`` in the given order."""
    return ",".join(f"{key}={value}" for key, value in labels.items())


def pod_labels(pod: RawObject) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def parse_index(value: str | None) -> int | None:
    """A replica index label value as an int; ``None`` when absent or not a number."""
    if value is None or not str(value).isdigit():
        return None
    return int(value)


def canonical_type(value: str, known: Iterable[str]) -> str:
    """A lower-case replica-type label in the kind's spelling (``ps`` -> ``PS``); unknown ones stay."""
    by_lower = {type_.lower(): type_ for type_ in known}
    return by_lower.get(value.lower(), value)

"""The two legacy MXNet operators, which predate ``kubeflow.org/v1``:

================  =========================  =================================  ===========================
kind              apiVersion                 replica objects                    chief (decides the outcome)
================  =========================  =================================  ===========================
``MxJob``         ``mxnet.mlkube.io/v1beta1``  one batch/v1 Job per replica index  SCHEDULER (dist) / WORKER
``MXJob``         ``kubeflow.org/v1alpha1``    Pods + Services                    ``terminationPolicy.chief``
================  =========================  =================================  ===========================

Both report ``status.phase`` (``Creating``, ``Running``, ``CleanUp``, ``Done``, ``Failed``) and ``state``
(``Running``, ``Succeeded``, ``Failed``). A training failure ends as ``phase: Done, state: Failed``;
``phase: Failed`` means only that the operator refused the job at setup.

``get_kind("MXJob")`` stays the ``kubeflow.org/v1`` MXJob (the registry lists that family first); the legacy
one is ``get_kind("MXJob", "kubeflow.org/v1alpha1")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from airflow_provider_training.kinds.base import (
    ChildObjects,
    JobKind,
    JobState,
    JobStatus,
    RawObject,
    ReplicaCounts,
    ReplicaPod,
    ResourceRef,
)
from airflow_provider_training.kinds.common import (
    STATUS_GRACE_SECONDS,
    canonical_type,
    label_selector,
    parse_index,
    pending_without_status,
    pod_labels,
)

FAMILY = "mxnet-legacy"
REPLICA_TYPES = ("SCHEDULER", "SERVER", "WORKER")
DEFAULT_CONTAINER = "mxnet"
JOB_TYPE_LABEL = "job_type"
RUNTIME_ID_LABEL = "runtime_id"
TASK_INDEX_LABEL = "task_index"

# Phases on the way to an outcome; the outcome itself is read from ``state``.
PHASES: dict[str, tuple[JobState, str]] = {
    "Creating": (JobState.PENDING, "the operator is creating the replicas"),
    "Running": (JobState.RUNNING, "the replicas are running"),
    "CleanUp": (JobState.RUNNING, "the operator is cleaning up the replicas"),
}


@dataclass(frozen=True)
class Lineage:
    """What differs between the two legacy operators."""

    group: str
    version: str
    kind: str
    marker_label: str  # every replica pod carries it with the value ""
    job_name_label: str | None  # the label holding the job name; the mlkube operator has none
    replica_status_type_key: str  # the replica type's key in status.replicaStatuses[]
    operator: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


MLKUBE = Lineage(
    "mxnet.mlkube.io",
    "v1beta1",
    "MxJob",
    "mxnet.mlkube.io",
    None,
    "Mx_replica_type",
    "deepinsight/mxnet-operator",
)
V1ALPHA1 = Lineage(
    "kubeflow.org",
    "v1alpha1",
    "MXJob",
    "kubeflow.org",
    "mx_job_name",
    "mx_replica_type",
    "kubeflow/mxnet-operator",
)
LINEAGES = (MLKUBE, V1ALPHA1)


def chief(job: RawObject, lineage: Lineage) -> tuple[str, int]:
    """The replica whose outcome is the job's: SCHEDULER in dist mode, else WORKER (mlkube);
    ``terminationPolicy.chief`` defaulting to WORKER 0 (v1alpha1)."""
    spec = job.get("spec") or {}
    if lineage is MLKUBE:
        return ("SCHEDULER" if spec.get("jobMode") == "dist" else "WORKER"), 0
    policy = (spec.get("terminationPolicy") or {}).get("chief") or {}
    return str(policy.get("replicaName") or "WORKER"), int(policy.get("replicaIndex") or 0)


def desired_replicas(job: RawObject) -> dict[str, int | None]:
    """Replicas per ``mxReplicaType`` (default WORKER), each defaulting to 1."""
    desired: dict[str, int | None] = {}
    for spec in (job.get("spec") or {}).get("replicaSpecs") or []:
        type_ = str((spec or {}).get("mxReplicaType") or "WORKER")
        count = (spec or {}).get("replicas")
        desired[type_] = (desired.get(type_) or 0) + (1 if count is None else int(count))
    return desired


def replica_counts(job: RawObject, lineage: Lineage) -> dict[str, ReplicaCounts]:
    """Desired from the spec; active/succeeded/failed from ``replicaStatuses[].ReplicasStates``."""
    desired = desired_replicas(job)
    observed: dict[str, Mapping[str, Any]] = {}
    for entry in (job.get("status") or {}).get("replicaStatuses") or []:
        type_ = entry.get(lineage.replica_status_type_key) or entry.get(
            lineage.replica_status_type_key.lower()
        )
        observed[str(type_)] = entry.get("ReplicasStates") or {}
    counts: dict[str, ReplicaCounts] = {}
    for type_ in [*desired, *(t for t in observed if t not in desired)]:
        states = observed.get(type_) or {}
        counts[type_] = ReplicaCounts(
            desired=desired.get(type_),
            active=int(states.get("Running") or 0) + int(states.get("Starting") or 0),
            succeeded=int(states.get("Succeeded") or 0),
            failed=int(states.get("Failed") or 0),
        )
    return counts


def no_status_causes(lineage: Lineage) -> str:
    return (
        f"the legacy MXNet operator for {lineage.kind} {lineage.api_version} ({lineage.operator}) seems not "
        "to be running; it sets phase Creating as soon as it sees the job"
    )


def read_status(
    lineage: Lineage,
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """``phase: Failed`` is a setup error; ``state`` Succeeded/Failed at ``CleanUp`` or ``Done`` is the
    chief's outcome; Creating is PENDING, Running (and a CleanUp without outcome) RUNNING."""
    status: Mapping[str, Any] = job.get("status") or {}
    phase, state = str(status.get("phase") or ""), str(status.get("state") or "")
    reason = str(status.get("reason") or "")
    replicas = replica_counts(job, lineage)
    chief_type, chief_index = chief(job, lineage)
    deciding = f"the chief replica {chief_type}-{chief_index}"
    why = f": {reason}" if reason else ""
    if phase == "Failed":
        message = f"the {lineage.operator} operator refused the job at setup (phase Failed){why}"
        return JobStatus(JobState.FAILED, "SetupFailed", message, replicas)
    if phase in ("Done", "CleanUp") and state == "Succeeded":
        return JobStatus(JobState.SUCCEEDED, "Succeeded", f"{deciding} succeeded{why}", replicas)
    if phase in ("Done", "CleanUp") and state == "Failed":
        return JobStatus(JobState.FAILED, "Failed", f"{deciding} failed{why}", replicas)
    if phase == "Done":
        message = f"the operator finished the job with state {state or 'unset'!r}{why}"
        return JobStatus(JobState.FAILED, "Done", message, replicas)
    if phase in PHASES:
        job_state, text = PHASES[phase]
        return JobStatus(job_state, phase, f"{text}{why}", replicas)
    if not phase:
        return pending_without_status(
            job, causes=no_status_causes(lineage), replicas=replicas, now=now, grace_seconds=grace_seconds
        )
    return JobStatus(JobState.PENDING, phase, f"unknown phase {phase!r}{why}", replicas)


def pod_selector(lineage: Lineage, job_name: str) -> str:
    """The marker label, and the job name where the lineage labels it (mlkube pods need :func:`owns_pod`)."""
    if lineage.job_name_label is None:
        return lineage.marker_label
    return f"{lineage.marker_label},{label_selector({lineage.job_name_label: job_name})}"


def master_selector(lineage: Lineage, job_name: str) -> str:
    """WORKER 0, whose log shows the training (the mlkube dist chief, SCHEDULER, only coordinates)."""
    return f"{pod_selector(lineage, job_name)},{JOB_TYPE_LABEL}=WORKER,{TASK_INDEX_LABEL}=0"


def owns_pod(lineage: Lineage, job_name: str, pod: RawObject) -> bool:
    """mlkube pods carry no job name; their batch Job's name ``<job>-<type>-<RuntimeId>-<index>`` starts the
    pod name, so it must match the pod's own type, runtime id and index labels."""
    if lineage.job_name_label is not None:
        return pod_labels(pod).get(lineage.job_name_label) == job_name
    labels = pod_labels(pod)
    parts = (labels.get(JOB_TYPE_LABEL), labels.get(RUNTIME_ID_LABEL), labels.get(TASK_INDEX_LABEL))
    if lineage.marker_label not in labels or any(part is None for part in parts):
        return False
    type_, runtime_id, index = parts
    batch_job = f"{job_name}-{str(type_).lower()}-{runtime_id}-{index}"
    name = str((pod.get("metadata") or {}).get("name", ""))
    return name == batch_job or name.startswith(f"{batch_job}-")


def replica_of_pod(pod: RawObject) -> ReplicaPod:
    labels = pod_labels(pod)
    return ReplicaPod(
        replica_type=canonical_type(labels.get(JOB_TYPE_LABEL, ""), REPLICA_TYPES),
        index=parse_index(labels.get(TASK_INDEX_LABEL)),
        name=str((pod.get("metadata") or {}).get("name", "")),
    )


def job_kind(lineage: Lineage) -> JobKind:
    return JobKind(
        resource=ResourceRef(lineage.group, lineage.version, "mxjobs", lineage.kind),
        family=FAMILY,
        replica_types=REPLICA_TYPES,
        default_container=DEFAULT_CONTAINER,
        read_status=partial(read_status, lineage),
        pod_selector=partial(pod_selector, lineage),
        master_selector=partial(master_selector, lineage),
        replica_of_pod=replica_of_pod,
        replica_spec_key="replicaSpecs",
        owns_pod=partial(owns_pod, lineage),
        # As chief() decides: mlkube's dist SCHEDULER, else WORKER (v1alpha1's default terminationPolicy).
        deciding_replicas=("SCHEDULER", "WORKER") if lineage is MLKUBE else ("WORKER",),
        # The marker every replica pod carries (valued ""); mlkube pods have no job-name label to narrow it.
        pod_watch_selectors=(lineage.marker_label,),
    )


KINDS: tuple[JobKind, ...] = tuple(job_kind(lineage) for lineage in LINEAGES)

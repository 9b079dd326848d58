"""The Kubeflow Training Operator ``kubeflow.org/v1`` kinds: TFJob, PyTorchJob, MXJob, XGBoostJob, PaddleJob,
MPIJob (v1) and JAXJob.

All seven share one status shape (``status.conditions`` + ``replicaStatuses``) and one pod labelling
scheme, so one table row per kind plus the shared functions below describe them all.

The ``job-role=master`` pod (whose logs matter most), as the operator labels it:

============  ==========================================================
TFJob         Chief (or its legacy alias Master) if present, else Worker 0
PyTorchJob    Master if present, else Worker 0
XGBoostJob    Master
PaddleJob     Master
MXJob         Server
MPIJob (v1)   Launcher (a bare pod ``<job>-launcher`` without replica index)
JAXJob        Worker 0
============  ==========================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
    ReplicaFailure,
    ReplicaPod,
    ResourceRef,
    parse_time,
)
from airflow_provider_training.kinds.common import (
    STATUS_GRACE_SECONDS,
    canonical_type,
    first_true_condition,
    label_selector,
    parse_index,
    pending_without_status,
    pod_labels,
    replica_counts,
)

GROUP = "kubeflow.org"
VERSION = "v1"
FAMILY = "kubeflow"

OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

# Condition types in the order that decides the state; a job may carry several true ones (issue #1650).
CONDITION_STATES: tuple[tuple[str, JobState], ...] = (
    ("Failed", JobState.FAILED),
    ("Succeeded", JobState.SUCCEEDED),
    ("Suspended", JobState.SUSPENDED),
    ("Restarting", JobState.RESTARTING),
    ("Running", JobState.RUNNING),
    ("Created", JobState.PENDING),
)


@dataclass(frozen=True)
class Layout:
    """What differs between the kubeflow.org/v1 kinds."""

    kind: str
    plural: str
    replica_spec_key: str
    replica_types: tuple[str, ...]
    default_container: str
    # The replica types whose outcome is the job's, in order of preference (see JobKind.deciding_replicas).
    deciding: tuple[str, ...] = ()
    # Replica types whose ``replicas`` defaults to 0 instead of 1.
    zero_by_default: tuple[str, ...] = ()

    @property
    def controller(self) -> str:
        """The ``training.kubeflow.org/operator-name`` label value, e.g. ``pytorchjob-controller``."""
        return f"{self.kind.lower()}-controller"

    def default_replicas(self, replica_type: str) -> int:
        return 0 if replica_type in self.zero_by_default else 1


LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "TFJob",
        "tfjobs",
        "tfReplicaSpecs",
        ("Chief", "PS", "Worker", "Evaluator", "Master"),
        "tensorflow",
        deciding=("Chief", "Master", "Worker"),
    ),
    Layout(
        "PyTorchJob",
        "pytorchjobs",
        "pytorchReplicaSpecs",
        ("Master", "Worker"),
        "pytorch",
        deciding=("Master", "Worker"),
    ),
    Layout(
        "MXJob",
        "mxjobs",
        "mxReplicaSpecs",
        ("Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"),
        "mxnet",
        deciding=("Scheduler", "Worker"),
    ),
    Layout("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", ("Master", "Worker"), "xgboost", ("Master",)),
    Layout(
        "PaddleJob", "paddlejobs", "paddleReplicaSpecs", ("Master", "Worker"), "paddle", ("Master", "Worker")
    ),
    Layout(
        "MPIJob",
        "mpijobs",
        "mpiReplicaSpecs",
        ("Launcher", "Worker"),
        "mpi",
        ("Launcher",),
        zero_by_default=("Worker",),
    ),
    Layout("JAXJob", "jaxjobs", "jaxReplicaSpecs", ("Worker",), "jax", ("Worker",)),
)
LAYOUT_BY_KIND = {layout.kind: layout for layout in LAYOUTS}


def no_status_causes(layout: Layout) -> str:
    return (
        f"the training operator for {layout.kind} ({layout.controller}) seems not to be running. "
        "Other causes: "
        f"the operator runs with the {layout.kind} controller disabled (--enable-scheme); the job failed "
        f"validation, for which the operator writes no condition and only emits a Warning event "
        f"{layout.kind}FailedValidation (see the job's events); or runPolicy.managedBy is "
        "kueue.x-k8s.io/multikueue, so another cluster runs it"
    )


def desired_replicas(job: RawObject, layout: Layout) -> dict[str, int | None]:
    """Replicas per type from the spec, with the operator's defaults (1; MPIJob Worker 0)."""
    specs = (job.get("spec") or {}).get(layout.replica_spec_key) or {}
    desired: dict[str, int | None] = {}
    for replica_type, spec in specs.items():
        replicas = (spec or {}).get("replicas")
        canonical = canonical_type(replica_type, layout.replica_types)
        desired[canonical] = layout.default_replicas(canonical) if replicas is None else int(replicas)
    return desired


def read_status(
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """Normalize a kubeflow.org/v1 job: the first true condition of Failed, Succeeded, Suspended, Restarting,
    Running, Created decides, matched by type and ``status == "True"``. No conditions at all is PENDING, and
    ``stalled`` once ``grace_seconds`` passed since ``metadata.creationTimestamp`` (``now`` is injectable).
    """
    layout = LAYOUT_BY_KIND.get(str(job.get("kind")))
    if layout is None:
        raise ValueError(f"not a kubeflow.org/v1 job kind: {job.get('kind')!r}")
    return layout_status(layout, no_status_causes(layout), job, now=now, grace_seconds=grace_seconds)


def layout_status(
    layout: Layout,
    causes: str,
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """:func:`read_status` of a job laid out as ``layout`` (also the MPI Operator's ``v2beta1`` MPIJob, whose
    status has the same shape); ``causes`` says why its status may stay empty. ``children`` are unused (the
    status is the object's own), taken to fit :class:`~airflow_provider_training.kinds.base.StatusReader`."""
    status: Mapping[str, Any] = job.get("status") or {}
    replicas = replica_counts(desired_replicas(job, layout), status.get("replicaStatuses"))
    conditions = status.get("conditions") or []
    if not conditions:
        return pending_without_status(
            job, causes=causes, replicas=replicas, now=now, grace_seconds=grace_seconds
        )
    states = dict(CONDITION_STATES)
    deciding = first_true_condition(conditions, states)
    return JobStatus(
        state=states[deciding["type"]] if deciding else JobState.PENDING,
        reason=(deciding or {}).get("reason") or "",
        message=(deciding or {}).get("message") or "",
        replicas=replicas,
        start=parse_time(status.get("startTime")),
        end=parse_time(status.get("completionTime")),
    )


def pod_selector(layout: Layout, job_name: str) -> str:
    """Every replica pod of this job; the operator-name keeps same-named jobs of other kinds out."""
    return label_selector({JOB_NAME_LABEL: job_name, OPERATOR_NAME_LABEL: layout.controller})


def master_selector(layout: Layout, job_name: str) -> str:
    return f"{pod_selector(layout, job_name)},{JOB_ROLE_LABEL}=master"


def replica_of_pod(layout: Layout, pod: RawObject) -> ReplicaPod:
    """Replica type (in the kind's casing) and index from the pod's labels; the MPI launcher has no index."""
    labels = pod_labels(pod)
    return ReplicaPod(
        replica_type=canonical_type(labels.get(REPLICA_TYPE_LABEL, ""), layout.replica_types),
        index=parse_index(labels.get(REPLICA_INDEX_LABEL)),
        name=(pod.get("metadata") or {}).get("name", ""),
    )


# The operator's events about a replica's end (common/pod.go, common/job.go recordAbnormalPods).
_EXITED = re.compile(r"^Pod: [^.]+\.(?P<pod>\S+) exited with code (?P<code>-?\d+)$")
_ABNORMAL = re.compile(
    r"^Error pod (?P<pod>\S+) container (?P<container>\S+) (?:exitCode: (?P<code>-?\d+) terminated"
    r"|waiting) message: (?P<message>.*)$",
    re.DOTALL,
)


def failures_in_events(layout: Layout, job_name: str, events: Sequence[RawObject]) -> list[ReplicaFailure]:
    """Failing replicas the job's events name (``ExitedWithCode``, the abnormal-pod warnings of crashed or
    back-off waiting containers): per pod the newest with an exit code, else the newest without (exit code
    ``None``). The replica type and index come from the pod name ``<job>-<type>-<index>``."""
    found: dict[str, ReplicaFailure] = {}
    for event in events:
        text = str(event.get("message") or "")
        match = _ABNORMAL.match(text) or _EXITED.match(text)
        code = None if match is None or match["code"] is None else int(match["code"])
        if match is None or code == 0:
            continue
        groups = match.groupdict()
        pod = groups["pod"]
        if code is None and pod in found and found[pod].exit_code is not None:
            continue  # a back-off after the crash whose exit code is known
        replica_type, index = _replica_of_name(layout, job_name, pod)
        found[pod] = ReplicaFailure(
            pod=pod,
            replica_type=replica_type,
            index=index,
            container=groups.get("container") or layout.default_container,
            exit_code=code,
            reason=str(event.get("reason") or "") if "container" in groups else "",
            message=(groups.get("message") or "").strip(),
            source="events",
        )
    return list(found.values())


def _replica_of_name(layout: Layout, job_name: str, pod: str) -> tuple[str, int | None]:
    suffix = pod.removeprefix(f"{job_name}-")
    type_, _, index = suffix.rpartition("-")
    if not index.isdigit():
        type_, index = suffix, ""
    return canonical_type(type_, layout.replica_types), parse_index(index)


def suspend_patch(suspend: bool) -> dict[str, Any]:
    """``runPolicy.suspend`` (Training Operator >= 1.7): suspending deletes the replica pods."""
    return {"spec": {"runPolicy": {"suspend": suspend}}}


def job_kind(layout: Layout) -> JobKind:
    return JobKind(
        resource=ResourceRef(GROUP, VERSION, layout.plural, layout.kind),
        family=FAMILY,
        replica_types=layout.replica_types,
        default_container=layout.default_container,
        read_status=read_status,
        pod_selector=partial(pod_selector, layout),
        master_selector=partial(master_selector, layout),
        replica_of_pod=partial(replica_of_pod, layout),
        replica_spec_key=layout.replica_spec_key,
        suspend_patch=suspend_patch,
        deciding_replicas=layout.deciding,
        failures_in_events=partial(failures_in_events, layout),
        # Every replica pod of every kind (the operator labels them all with the job name): one pod watch
        # for the family.
        pod_watch_selectors=(JOB_NAME_LABEL,),
    )


KINDS: tuple[JobKind, ...] = tuple(job_kind(layout) for layout in LAYOUTS)

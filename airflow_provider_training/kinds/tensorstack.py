"""TensorStack T9k jobs (``batch.tensorstack.dev/v1beta1``): TensorFlowTrainingJob, PyTorchTrainingJob,
XGBoostTrainingJob, DeepSpeedJob, ColossalAIJob, MPIJob (T9k's, not Kubeflow's) and GenericJob.

All share one status shape: ``phase``, ``conditions``, ``tasks[]`` (per replica type: ``replicas[]`` with pod
name, phase and container exit codes) and ``aggregate`` (pod counts). Reading order matters: the controller
sets ``Completed=True`` on failure as well, so Failed is checked before Completed; Paused is not terminal.

Pods are ``<job>-<type>-<index>`` (launchers ``<job>-launcher``), labelled
``tensorstack.dev/owner-name=<job>``; no replica-type label is documented, so the type and index come from
the name. No label tells the master pod apart either, so ``master_selector`` is every replica pod of the job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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
    ReplicaFailure,
    ReplicaPod,
    ResourceRef,
    parse_time,
)
from airflow_provider_training.kinds.common import (
    STATUS_GRACE_SECONDS,
    label_selector,
    pending_without_status,
    pod_labels,
    true_condition,
)

GROUP = "batch.tensorstack.dev"
VERSION = "v1beta1"
FAMILY = "tensorstack"
OWNER_LABEL = "tensorstack.dev/owner-name"

ACTIVE_POD_PHASES = frozenset({"Pending", "Creating", "Running", "Unknown"})
_INDEXED = re.compile(r"^(?P<type>.+)-(?P<index>\d+)$")


@dataclass(frozen=True)
class Layout:
    """What differs between the T9k kinds."""

    kind: str
    plural: str
    replica_types: tuple[str, ...]  # () for GenericJob's free names
    default_container: str
    has_launcher: bool = False  # an unindexed ``<job>-launcher`` pod beside the workers
    # ``replicaSpecs`` for the kinds with a spec model (builders pack the list); others: write the manifest.
    replica_spec_key: str | None = None
    # The replica types whose outcome is the job's (see JobKind.deciding_replicas); () for the first one.
    deciding: tuple[str, ...] = ()


LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "TensorFlowTrainingJob",
        "tensorflowtrainingjobs",
        ("chief", "worker", "ps", "evaluator"),
        "tensorflow",
        replica_spec_key="replicaSpecs",
        deciding=("chief", "worker"),
    ),
    Layout(
        "PyTorchTrainingJob",
        "pytorchtrainingjobs",
        ("master", "worker", "node", "ps"),
        "pytorch",
        replica_spec_key="replicaSpecs",
        deciding=("master",),
    ),
    Layout(
        "XGBoostTrainingJob",
        "xgboosttrainingjobs",
        ("master", "worker"),
        "xgboost",
        replica_spec_key="replicaSpecs",
        deciding=("master",),
    ),
    Layout("DeepSpeedJob", "deepspeedjobs", ("worker",), "worker", deciding=("worker",)),
    Layout(
        "ColossalAIJob",
        "colossalaijobs",
        ("launcher", "worker"),
        "worker",
        has_launcher=True,
        deciding=("launcher",),
    ),
    Layout("MPIJob", "mpijobs", ("launcher", "worker"), "worker", has_launcher=True, deciding=("launcher",)),
    Layout("GenericJob", "genericjobs", (), ""),
)
LAYOUT_BY_KIND = {layout.kind: layout for layout in LAYOUTS}

NO_STATUS_CAUSES = (
    "the T9k job controller seems not to be running, or this cluster has no TensorStack platform; "
    "see the job's events"
)


def _spec(job: RawObject) -> Mapping[str, Any]:
    return job.get("spec") or {}


def desired_replicas(job: RawObject, layout: Layout) -> dict[str, int | None]:
    """Per type from ``spec.replicaSpecs[]`` (replicas default 1); the older DeepSpeedJob, MPIJob and
    ColossalAIJob shape has ``spec.worker.replicas`` and one launcher."""
    spec = _spec(job)
    desired: dict[str, int | None] = {}
    for replica in spec.get("replicaSpecs") or []:
        count = (replica or {}).get("replicas")
        type_ = str((replica or {}).get("type", ""))
        desired[type_] = (desired.get(type_) or 0) + (1 if count is None else int(count))
    if not desired and isinstance(spec.get("worker"), Mapping):
        if layout.has_launcher:
            desired["launcher"] = 1
        count = spec["worker"].get("replicas")
        desired["worker"] = 1 if count is None else int(count)
    return desired


def task_replicas(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A task's replica entries: ``replicas`` (real output), else ``status`` or ``replicaStatus`` (docs)."""
    for key in ("replicas", "status", "replicaStatus"):
        entries = task.get(key)
        if isinstance(entries, list):
            return entries
    return []


def _tasks(job: RawObject) -> list[Mapping[str, Any]]:
    return list(((job.get("status") or {}).get("tasks")) or [])


def pod_names(job: RawObject) -> list[str]:
    """The replica pod names the controller recorded in ``status.tasks[].replicas[].name``."""
    return [str(entry["name"]) for task in _tasks(job) for entry in task_replicas(task) if entry.get("name")]


def _index(pod_name: str) -> int | None:
    match = _INDEXED.match(pod_name)
    return int(match["index"]) if match else None


def failed_replicas(job: RawObject) -> list[ReplicaFailure]:
    """Each replica the status records as failing: a container with a non-zero ``exitCode``, or a Failed pod
    without one."""
    failures: list[ReplicaFailure] = []
    for task in _tasks(job):
        type_ = str(task.get("type", ""))
        for entry in task_replicas(task):
            name = str(entry.get("name", ""))
            replica = partial(
                ReplicaFailure,
                type_,
                pod=name,
                index=_index(name),
                restarts=int(task.get("restartCount") or 0),
            )
            failing = [c for c in entry.get("containers") or [] if c.get("exitCode") not in (None, 0)]
            for container in failing:
                failures.append(
                    replica(
                        container=container.get("name"),
                        exit_code=int(container["exitCode"]),
                        reason=str(container.get("state") or ""),
                    )
                )
            if not failing and entry.get("phase") == "Failed":
                failures.append(replica(reason="Failed"))
    return failures


def replica_counts(job: RawObject, layout: Layout) -> dict[str, ReplicaCounts]:
    """Per replica type from ``tasks`` (desired from the spec); without tasks, one ``all`` row from
    ``aggregate``."""
    desired = desired_replicas(job, layout)
    tasks = _tasks(job)
    if not tasks:
        aggregate = (job.get("status") or {}).get("aggregate")
        if not aggregate:
            return {type_: ReplicaCounts(desired=count) for type_, count in desired.items()}
        return {"all": aggregate_counts(aggregate, sum(c or 0 for c in desired.values()) or None)}
    phases: dict[str, list[str]] = {}
    for task in tasks:
        phases.setdefault(str(task.get("type", "")), []).extend(
            str(entry.get("phase", "")) for entry in task_replicas(task)
        )
    return {
        type_: ReplicaCounts(
            desired=desired.get(type_),
            active=sum(1 for phase in phases.get(type_, []) if phase in ACTIVE_POD_PHASES),
            succeeded=phases.get(type_, []).count("Succeeded"),
            failed=phases.get(type_, []).count("Failed"),
        )
        for type_ in [*desired, *(t for t in phases if t not in desired)]
    }


def aggregate_counts(aggregate: Mapping[str, Any], desired: int | None) -> ReplicaCounts:
    active = sum(int(aggregate.get(key) or 0) for key in ("creating", "pending", "running", "unknown"))
    return ReplicaCounts(
        desired=desired,
        active=active,
        succeeded=int(aggregate.get("succeeded") or 0),
        failed=int(aggregate.get("failed") or 0),
    )


def _failure_summary(failures: Iterable[ReplicaFailure]) -> str:
    parts = [
        f"{f.pod} ({f.container}) exit code {f.exit_code}" if f.exit_code is not None else f"{f.pod} failed"
        for f in failures
    ]
    return f"; failing replicas: {', '.join(parts)}" if parts else ""


def read_status(
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """Failed (phase or condition) before Succeeded (phase or ``Completed=True``), then Paused (SUSPENDED,
    not terminal); Pending, Running, Resuming and Unknown keep the job waiting."""
    layout = LAYOUT_BY_KIND.get(str(job.get("kind")))
    if layout is None:
        raise ValueError(f"not a TensorStack job kind: {job.get('kind')!r}")
    status: Mapping[str, Any] = job.get("status") or {}
    replicas = replica_counts(job, layout)
    conditions = status.get("conditions") or []
    phase = str(status.get("phase") or "")
    if not phase and not conditions:
        return pending_without_status(
            job, causes=NO_STATUS_CAUSES, replicas=replicas, now=now, grace_seconds=grace_seconds
        )
    start = parse_time((true_condition(conditions, "Initialized") or {}).get("lastTransitionTime"))

    def status_from(
        state: JobState, reason: str, message: str, condition: Mapping[str, Any] | None = None
    ) -> JobStatus:
        condition = condition or {}
        end = parse_time(condition.get("lastTransitionTime")) if state.terminal else None
        return JobStatus(
            state,
            condition.get("reason") or reason,
            condition.get("message") or message,
            replicas,
            start,
            end,
        )

    failed = true_condition(conditions, "Failed")
    if phase == "Failed" or failed is not None:
        base = status_from(JobState.FAILED, "Failed", f"{layout.kind} failed", failed)
        return base.with_state(JobState.FAILED, message=base.message + _failure_summary(failed_replicas(job)))
    completed = true_condition(conditions, "Completed")
    if phase == "Succeeded" or completed is not None:
        return status_from(JobState.SUCCEEDED, "Succeeded", f"{layout.kind} succeeded", completed)
    if phase == "Paused" or true_condition(conditions, "Paused") is not None:
        message = (
            "paused (spec.runMode.pause.enabled: true): its replica pods are deleted until it is resumed by "
            "setting spec.runMode.pause.enabled to false"
        )
        return JobStatus(JobState.SUSPENDED, "Paused", message, replicas, start)
    if phase == "Running" or (not phase and true_condition(conditions, "Running") is not None):
        return JobStatus(JobState.RUNNING, "Running", "", replicas, start)
    messages = {
        "Resuming": "resuming from pause",
        "Unknown": "the T9k controller could not determine the phase",
    }
    return JobStatus(JobState.PENDING, phase or "Pending", messages.get(phase, ""), replicas, start)


def debug_enabled(job: RawObject) -> bool:
    """``spec.runMode.debug.enabled`` (``enable`` before the 2024 rename)."""
    debug = ((_spec(job).get("runMode") or {}).get("debug")) or {}
    return debug.get("enabled") is True or debug.get("enable") is True


def check_target(job: RawObject, target: JobState) -> str | None:
    """A job in debug mode never succeeds: its replicas run ``sleep inf`` (or sshd) instead of training."""
    if target != JobState.SUCCEEDED or not debug_enabled(job):
        return None
    name = (job.get("metadata") or {}).get("name", "")
    return (
        f"{job.get('kind')} {name} runs in debug mode (spec.runMode.debug.enabled: true): its replicas run a "
        "placeholder command instead of training, so it never succeeds. Wait for Running instead, or submit "
        "it without runMode.debug"
    )


def suspend_patch(suspend: bool) -> dict[str, Any]:
    """``runMode.pause.enabled``: pausing deletes the replica pods; resuming recreates them."""
    return {"spec": {"runMode": {"pause": {"enabled": suspend}}}}


def pod_selector(job_name: str) -> str:
    return label_selector({OWNER_LABEL: job_name})


def replica_of_pod(pod: RawObject) -> ReplicaPod:
    """Type and index from the pod name after ``<owner-name>-``: ``<type>-<index>``, or ``launcher``."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    owner = pod_labels(pod).get(OWNER_LABEL)
    rest = name[len(owner) + 1 :] if owner and name.startswith(f"{owner}-") else name
    match = _INDEXED.match(rest)
    if match:
        type_ = match["type"] if owner else match["type"].rsplit("-", 1)[-1]
        return ReplicaPod(replica_type=type_, index=int(match["index"]), name=name)
    return ReplicaPod(replica_type=rest if owner else rest.rsplit("-", 1)[-1], index=None, name=name)


def job_kind(layout: Layout) -> JobKind:
    return JobKind(
        resource=ResourceRef(GROUP, VERSION, layout.plural, layout.kind),
        family=FAMILY,
        replica_types=layout.replica_types,
        default_container=layout.default_container,
        read_status=read_status,
        pod_selector=pod_selector,
        master_selector=pod_selector,
        replica_of_pod=replica_of_pod,
        replica_spec_key=layout.replica_spec_key,
        check_target=check_target,
        failed_replicas=failed_replicas,
        suspend_patch=suspend_patch,
        deciding_replicas=layout.deciding,
        pod_watch_selectors=(OWNER_LABEL,),  # the only pod label documented for jobs (tensorstack-t9k.md)
    )


KINDS: tuple[JobKind, ...] = tuple(job_kind(layout) for layout in LAYOUTS)

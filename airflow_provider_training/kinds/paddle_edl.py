"""PaddlePaddle EDL ``TrainingJob`` (``paddlepaddle.org/v1``), both JSON lineages.

The EDL controller of the resource lineage never writes ``status``: the job's state is derived from the
children it creates, which carry no ownerReferences and are never deleted by it (so cleanup deletes them):

=========  ==========================  ===========================  =====================
replica    child                       name                         pod label
=========  ==========================  ===========================  =====================
TRAINER    batch/v1 Job                ``<job>-trainer``            ``paddle-job=<job>``
PSERVER    ReplicaSet                  ``<job>-pserver``            ``paddle-job-pserver``
MASTER     ReplicaSet                  ``<job>-master``             ``paddle-job-master``
=========  ==========================  ===========================  =====================

The API server's defaulting copies the pod-template labels onto the batch Job and the (extensions/v1beta1)
ReplicaSets, which the label selectors rely on; the exact child names serve servers that do not.
The CRD + updater lineage writes a lower-case ``status.phase`` (and ``reason``), which wins when present.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

from airflow_provider_training.kinds.base import (
    BATCH_JOBS,
    PODS,
    REPLICASETS,
    ChildObjects,
    ChildResource,
    JobKind,
    JobState,
    JobStatus,
    RawObject,
    ReplicaCounts,
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

GROUP = "paddlepaddle.org"
VERSION = "v1"
FAMILY = "paddle-edl"
KIND = "TrainingJob"

TRAINER, PSERVER, MASTER = "TRAINER", "PSERVER", "MASTER"
# Pod-template label of each replica type; its value is the TrainingJob's name.
LABELS: dict[str, str] = {TRAINER: "paddle-job", PSERVER: "paddle-job-pserver", MASTER: "paddle-job-master"}
SUFFIXES: dict[str, str] = {TRAINER: "-trainer", PSERVER: "-pserver", MASTER: "-master"}
DEFAULT_CONTAINER = "trainer"

# status.phase of the CRD lineage (lower case).
PHASES: dict[str, JobState] = {
    "creating": JobState.PENDING,
    "running": JobState.RUNNING,
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
}

NO_TRAINER_CAUSES = (
    "the EDL controller seems not to be running (Deployment training-job-controller, namespace paddlecloud). "
    "It creates the trainer Job and the master and pserver ReplicaSets; the resource lineage needs a "
    "Kubernetes 1.7 ThirdPartyResource training-job.paddlepaddle.org. Nothing else writes this job's status"
)


def child_name(replica_type: str, job_name: str) -> str:
    """``<job>-trainer``, ``<job>-pserver``, ``<job>-master``."""
    return f"{job_name}{SUFFIXES[replica_type]}"


def replica_selector(replica_type: str, job_name: str) -> str:
    """The pods of one replica type (and, by the API server's defaulting, their Job or ReplicaSet)."""
    return label_selector({LABELS[replica_type]: job_name})


trainer_selector = partial(replica_selector, TRAINER)
trainer_job_name = partial(child_name, TRAINER)


def extra_pod_selectors(job_name: str) -> tuple[str, ...]:
    """The pserver and master pods, whose labels differ from the trainers'."""
    return (replica_selector(PSERVER, job_name), replica_selector(MASTER, job_name))


CHILDREN: tuple[ChildResource, ...] = (
    ChildResource(BATCH_JOBS, trainer_selector, True, True, name=trainer_job_name),
    *(
        ChildResource(REPLICASETS, partial(replica_selector, t), True, True, name=partial(child_name, t))
        for t in (PSERVER, MASTER)
    ),
    *(ChildResource(PODS, partial(replica_selector, t), True, True) for t in (TRAINER, PSERVER, MASTER)),
)


def _name(obj: RawObject) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _named(objects: list[RawObject], name: str) -> RawObject | None:
    return next((obj for obj in objects if _name(obj) == name), None)


def _int(value: Any, default: int = 0) -> int:
    return default if value is None else int(value)


def _trainer_spec(job: RawObject) -> Mapping[str, Any]:
    return ((job.get("spec") or {}).get("trainer")) or {}


def is_elastic(job: RawObject) -> bool:
    """EDL's ``Elastic()``: trainer ``min-instance < max-instance`` (the autoscaler only scales these)."""
    trainer = _trainer_spec(job)
    return _int(trainer.get("min-instance")) < _int(trainer.get("max-instance"))


def _live_pods(pods: list[RawObject], replica_type: str, job_name: str) -> list[RawObject]:
    """This type's pods that are not terminating, as the controller's ``Cluster.JobPods`` counts them."""
    label = LABELS[replica_type]
    return [
        pod
        for pod in pods
        if pod_labels(pod).get(label) == job_name and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def _phase_count(pods: list[RawObject], phase: str) -> int:
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == phase)


def _set_counts(
    replica_set: RawObject | None, pods: list[RawObject], spec_count: int | None
) -> ReplicaCounts:
    """A ReplicaSet's desired replicas; active from its pods (or its status when no pod was listed)."""
    desired = spec_count if replica_set is None else _int((replica_set.get("spec") or {}).get("replicas"), 1)
    if pods:
        active = sum(1 for pod in pods if (pod.get("status") or {}).get("phase") in ("Pending", "Running"))
        return ReplicaCounts(desired, active, _phase_count(pods, "Succeeded"), _phase_count(pods, "Failed"))
    observed = (replica_set or {}).get("status") or {}
    return ReplicaCounts(desired=desired, active=_int(observed.get("replicas")))


def replica_counts(job: RawObject, children: ChildObjects) -> dict[str, ReplicaCounts]:
    """TRAINER from the trainer Job (desired = its current parallelism), PSERVER and MASTER from their
    ReplicaSets; without children, from the CRD lineage's ``status.replica_statuses``."""
    name = _name(job)
    spec = job.get("spec") or {}
    pods = list(children.get(PODS.key) or [])
    sets = list(children.get(REPLICASETS.key) or [])
    trainer = _named(list(children.get(BATCH_JOBS.key) or []), trainer_job_name(name))
    counts: dict[str, ReplicaCounts] = {}
    if trainer is not None:
        observed = trainer.get("status") or {}
        counts[TRAINER] = ReplicaCounts(
            desired=_int((trainer.get("spec") or {}).get("parallelism"), 1),
            active=_int(observed.get("active")),
            succeeded=_int(observed.get("succeeded")),
            failed=_int(observed.get("failed")),
        )
    pserver_set = _named(sets, child_name(PSERVER, name))
    pserver_pods = _live_pods(pods, PSERVER, name)
    if pserver_set is not None or pserver_pods:
        desired = (spec.get("pserver") or {}).get("min-instance")
        counts[PSERVER] = _set_counts(pserver_set, pserver_pods, desired)
    master_set = _named(sets, child_name(MASTER, name))
    master_pods = _live_pods(pods, MASTER, name)
    if master_set is not None or master_pods:
        counts[MASTER] = _set_counts(master_set, master_pods, 1)
    for type_, recorded in _recorded_counts(job).items():
        counts.setdefault(type_, recorded)
    return counts


def _recorded_counts(job: RawObject) -> dict[str, ReplicaCounts]:
    """``replica_statuses[].resource_states`` (``{state: count}``) of the CRD lineage."""
    counts: dict[str, ReplicaCounts] = {}
    for entry in (job.get("status") or {}).get("replica_statuses") or []:
        states = {str(k).lower(): _int(v) for k, v in (entry.get("resource_states") or {}).items()}
        counts[str(entry.get("training_resource_type", "")).upper()] = ReplicaCounts(
            desired=None,
            active=states.get("starting", 0) + states.get("running", 0) + states.get("pending", 0),
            succeeded=states.get("succeeded", 0),
            failed=states.get("failed", 0),
        )
    return counts


def _trainer_outcome(job: RawObject, trainer: RawObject) -> tuple[JobState, str, str] | None:
    """The updater's rules on the trainer Job's counts; ``None`` while undecided.

    fault-tolerant: failed when every trainer failed (``failed >= parallelism``), succeeded when one succeeded
    and none is active; otherwise: failed when any trainer failed, succeeded when ``parallelism`` trainers
    succeeded and none is active. A Job the batch controller gave up on (``Failed=True``) has failed too.
    """
    observed = trainer.get("status") or {}
    parallelism = _int((trainer.get("spec") or {}).get("parallelism"), 1)
    active, succeeded, failed = (_int(observed.get(key)) for key in ("active", "succeeded", "failed"))
    counts = f"(parallelism {parallelism}, active {active}, succeeded {succeeded}, failed {failed})"
    given_up = true_condition(observed.get("conditions") or [], "Failed")
    if given_up is not None:
        why = given_up.get("message") or given_up.get("reason") or "failed"
        return JobState.FAILED, "TrainerJobFailed", f"the trainer Job {_name(trainer)} failed: {why} {counts}"
    if (job.get("spec") or {}).get("fault_tolerant"):
        if parallelism > 0 and failed >= parallelism:
            return JobState.FAILED, "TrainersFailed", f"all trainers failed {counts}"
        if succeeded != 0 and active == 0:
            return JobState.SUCCEEDED, "TrainersSucceeded", f"a trainer succeeded and none is active {counts}"
        return None
    if failed != 0:
        return JobState.FAILED, "TrainerFailed", f"at least one trainer failed {counts}"
    if parallelism > 0 and succeeded >= parallelism and active == 0:
        return JobState.SUCCEEDED, "TrainersSucceeded", f"all trainers succeeded {counts}"
    return None


def _elastic_note(job: RawObject, counts: Mapping[str, ReplicaCounts]) -> str:
    trainer = _trainer_spec(job)
    current = counts.get(TRAINER)
    if not is_elastic(job) or current is None:
        return ""
    low, high = trainer.get("min-instance"), trainer.get("max-instance")
    return f"; elastic: {current.desired} trainers (min-instance {low}, max-instance {high})"


def read_status(
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """The CRD lineage's ``status.phase`` when written; else derived from the trainer Job and pods."""
    children = children or {}
    name = _name(job)
    replicas = replica_counts(job, children)
    trainer = _named(list(children.get(BATCH_JOBS.key) or []), trainer_job_name(name))
    observed = (trainer or {}).get("status") or {}
    start, end = parse_time(observed.get("startTime")), parse_time(observed.get("completionTime"))
    elastic = _elastic_note(job, replicas)
    status: Mapping[str, Any] = job.get("status") or {}
    phase = str(status.get("phase") or "").lower()
    if phase in PHASES:
        message = (status.get("reason") or f"the updater reports phase {phase}") + elastic
        return JobStatus(PHASES[phase], phase.capitalize(), message, replicas, start, end)
    if trainer is None:
        return pending_without_status(
            job,
            causes=NO_TRAINER_CAUSES,
            replicas=replicas,
            now=now,
            grace_seconds=grace_seconds,
            missing=f"no trainer Job {trainer_job_name(name)}",
        )
    outcome = _trainer_outcome(job, trainer)
    if outcome is not None:
        state, reason, message = outcome
        return JobStatus(state, reason, message + elastic, replicas, start, end or _failed_at(trainer, state))
    trainers = _live_pods(list(children.get(PODS.key) or []), TRAINER, name)
    running = _phase_count(trainers, "Running") or _int(observed.get("ready"))
    if running:
        return JobStatus(
            JobState.RUNNING, "TrainersRunning", f"{running} trainer pod(s) running{elastic}", replicas, start
        )
    return JobStatus(
        JobState.PENDING, "TrainersPending", f"no trainer pod running yet{elastic}", replicas, start
    )


def _failed_at(trainer: RawObject, state: JobState) -> datetime | None:
    if state != JobState.FAILED:
        return None
    failed = true_condition((trainer.get("status") or {}).get("conditions") or [], "Failed") or {}
    return parse_time(failed.get("lastTransitionTime"))


def replica_of_pod(pod: RawObject) -> ReplicaPod:
    """TRAINER, PSERVER or MASTER from the pod's label; EDL pods have no index (ReplicaSet/Job pod names)."""
    labels = pod_labels(pod)
    type_ = next((type_ for type_, label in LABELS.items() if label in labels), "")
    return ReplicaPod(replica_type=type_, index=None, name=_name(pod))


def job_kind() -> JobKind:
    return JobKind(
        resource=ResourceRef(GROUP, VERSION, "trainingjobs", KIND),
        family=FAMILY,
        replica_types=(TRAINER, PSERVER, MASTER),
        default_container=DEFAULT_CONTAINER,
        read_status=read_status,
        pod_selector=trainer_selector,
        master_selector=trainer_selector,
        replica_of_pod=replica_of_pod,
        children=CHILDREN,
        extra_pod_selectors=extra_pod_selectors,
        deciding_replicas=(TRAINER,),  # the trainer Job's outcome is the job's
        # Each replica type's label key (trainer, pserver, master pods carry one each): one pod watch per key,
        # since a server-side selector cannot ask for one label or another.
        pod_watch_selectors=tuple(LABELS.values()),
    )


KINDS: tuple[JobKind, ...] = (job_kind(),)

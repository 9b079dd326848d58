"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``): the ``TrainJob``.

A TrainJob names a TrainingRuntime or ClusterTrainingRuntime; the Trainer controller turns both into a JobSet
of the same name, whose replicated jobs (``dataset-initializer``, ``model-initializer``, ``node``, and
``launcher`` for MPI runtimes) become batch Jobs and pods. Its status (kubeflow/trainer v2.0-2.3):

- ``conditions``: ``Complete`` and ``Failed`` copied from the JobSet's ``Completed``/``Failed`` (reason and
  message included), or ``Failed`` written by the Trainer controller itself (``TrainingRuntimeNotSupported``,
  ``DeadlineExceeded``); ``Suspended`` ``True`` (reason ``Suspended``) or ``False`` (reason ``Resumed``).
  There is no Created or Running condition: the Kubeflow SDK synthesizes those, and reports a resumed
  TrainJob as Created forever (kubeflow/sdk#803). Here a job without a deciding condition is RUNNING once
  ``jobsStatus`` shows an active or ready Job, else PENDING.
- ``jobsStatus``: per replicated job, counts of its child *Jobs* (not pods), as the JobSet reports them.
- ``trainerStatus`` (v2.2+): progress, estimated remaining time and metrics; shown in the status message
  and carried as :attr:`JobStatus.progress` into the trigger event and the XCom result.

When JobSet creation fails the TrainJob gets no condition at all (kubeflow/trainer#2351): an empty status
past the grace period is ``stalled`` like the other families' jobs whose operator is not running.

Pods carry the JobSet labels: ``jobset.sigs.k8s.io/jobset-name=<trainjob>``, the replicated job's name in
``jobset.sigs.k8s.io/replicatedjob-name`` (the replica type) and the node rank in the batch Job's
``batch.kubernetes.io/job-completion-index``. Upstream runtimes run one Job per replicated job; a pod of a
second Job of one replicated job (``jobset.sigs.k8s.io/job-index`` above 0) gets no index, since its rank is
not readable from its labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
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
    parse_time,
)
from airflow_provider_training.kinds.common import (
    STATUS_GRACE_SECONDS,
    label_selector,
    parse_index,
    pending_without_status,
    pod_labels,
    true_condition,
)

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
FAMILY = "trainer"
KIND = "TrainJob"

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

NODE = "node"
LAUNCHER = "launcher"
REPLICA_TYPES = ("dataset-initializer", "model-initializer", NODE, LAUNCHER)
DECIDING = (LAUNCHER, NODE)  # the MPI launcher decides when there is one, else the nodes (node-0's logs)

TRAINING_RUNTIMES = ResourceRef(GROUP, VERSION, "trainingruntimes", "TrainingRuntime")
CLUSTER_TRAINING_RUNTIMES = ResourceRef(GROUP, VERSION, "clustertrainingruntimes", "ClusterTrainingRuntime")

NO_STATUS_CAUSES = (
    "the Kubeflow Trainer controller seems not to be running, or it could not create the TrainJob's JobSet "
    "(then it writes no condition at all, kubeflow/trainer#2351: is JobSet installed, and is the runtime's "
    "template valid?); see the TrainJob's events and the trainer controller's log"
)


def jobs_status(job: RawObject) -> dict[str, ReplicaCounts]:
    """Per replicated job from ``status.jobsStatus``: counts of its Jobs (``ready`` counts as active, as a
    ready Job is one whose pods run). Empty without ``jobsStatus``: which replicated jobs the runtime has (a
    launcher or not) is not known yet, nor so the deciding replica."""
    entries = (job.get("status") or {}).get("jobsStatus") or []
    counts = {
        str(entry.get("name", "")): ReplicaCounts(
            desired=None,
            active=max(int(entry.get("active") or 0), int(entry.get("ready") or 0)),
            succeeded=int(entry.get("succeeded") or 0),
            failed=int(entry.get("failed") or 0),
        )
        for entry in entries
    }
    return counts


def trainer_status(job: RawObject) -> dict[str, Any] | None:
    """``status.trainerStatus`` (v2.2+) as written, ``None`` when absent or empty."""
    found = (job.get("status") or {}).get("trainerStatus")
    return dict(found) if isinstance(found, Mapping) and found else None


def trainer_progress(job: RawObject) -> str:
    """``trainerStatus`` in words: ``progress 40%, about 120s left, loss=0.31``; empty without it."""
    progress: Mapping[str, Any] = trainer_status(job) or {}
    parts = []
    if progress.get("progressPercentage") is not None:
        parts.append(f"progress {progress['progressPercentage']}%")
    if progress.get("estimatedRemainingSeconds") is not None:
        parts.append(f"about {progress['estimatedRemainingSeconds']}s left")
    parts += [f"{m.get('name')}={m.get('value')}" for m in progress.get("metrics") or [] if m.get("name")]
    return ", ".join(parts)


def _with_progress(message: str, job: RawObject) -> str:
    progress = trainer_progress(job)
    if not progress:
        return message
    return f"{message} (trainer: {progress})" if message else f"trainer: {progress}"


def read_status(
    job: RawObject,
    children: ChildObjects | None = None,
    *,
    now: datetime | None = None,
    grace_seconds: float = STATUS_GRACE_SECONDS,
) -> JobStatus:
    """``Failed=True`` before ``Complete=True`` before ``Suspended=True``; otherwise RUNNING when a Job of
    ``jobsStatus`` is active or ready (also after a resume: ``Suspended=False`` reason ``Resumed``), else
    PENDING. No conditions and no ``jobsStatus``: PENDING, ``stalled`` past ``grace_seconds``.

    ``start`` is the creation time (a TrainJob records no start), ``end`` the deciding condition's time.
    """
    status: Mapping[str, Any] = job.get("status") or {}
    replicas = jobs_status(job)
    conditions = status.get("conditions") or []
    if not conditions and not status.get("jobsStatus"):
        return pending_without_status(
            job, causes=NO_STATUS_CAUSES, replicas=replicas, now=now, grace_seconds=grace_seconds
        )
    start = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    for type_, state in (("Failed", JobState.FAILED), ("Complete", JobState.SUCCEEDED)):
        condition = true_condition(conditions, type_)
        if condition is not None:
            return JobStatus(
                state,
                str(condition.get("reason") or type_),
                _with_progress(str(condition.get("message") or ""), job),
                replicas,
                start,
                parse_time(condition.get("lastTransitionTime")),
                progress=trainer_status(job),
            )
    suspended = true_condition(conditions, "Suspended")
    if suspended is not None:
        message = str(suspended.get("message") or "") or "spec.suspend is true: its Jobs are suspended"
        return JobStatus(
            JobState.SUSPENDED, str(suspended.get("reason") or "Suspended"), message, replicas, start
        )
    running = any(counts.active for counts in replicas.values())
    state, reason = (JobState.RUNNING, "Running") if running else (JobState.PENDING, "Pending")
    return JobStatus(state, reason, _with_progress("", job), replicas, start, progress=trainer_status(job))


def suspend_patch(suspend: bool) -> dict[str, Any]:
    """``spec.suspend``: the JobSet's Jobs are suspended (pods deleted) until it is false again."""
    return {"spec": {"suspend": suspend}}


def pod_selector(job_name: str) -> str:
    return label_selector({JOBSET_NAME_LABEL: job_name})


def master_selector(job_name: str) -> str:
    """The launcher and node 0: the pods whose logs matter most (one selector cannot say "the launcher if
    there is one")."""
    return (
        f"{pod_selector(job_name)},{REPLICATED_JOB_LABEL} in ({LAUNCHER},{NODE}),{COMPLETION_INDEX_LABEL}=0"
    )


def replica_of_pod(pod: RawObject) -> ReplicaPod:
    """The replicated job's name and the pod's completion index (``None`` in a second Job of it)."""
    labels = pod_labels(pod)
    second_job = labels.get(JOB_INDEX_LABEL) not in (None, "0")
    return ReplicaPod(
        replica_type=labels.get(REPLICATED_JOB_LABEL, ""),
        index=None if second_job else parse_index(labels.get(COMPLETION_INDEX_LABEL)),
        name=(pod.get("metadata") or {}).get("name", ""),
    )


TRAIN_JOB = JobKind(
    resource=ResourceRef(GROUP, VERSION, "trainjobs", KIND),
    family=FAMILY,
    replica_types=REPLICA_TYPES,
    default_container=NODE,  # upstream runtimes name the trainer container "node" (the launcher's too)
    read_status=read_status,
    pod_selector=pod_selector,
    master_selector=master_selector,
    replica_of_pod=replica_of_pod,
    suspend_patch=suspend_patch,
    deciding_replicas=DECIDING,
    pod_watch_selectors=(JOBSET_NAME_LABEL,),
    # The Trainer (v2.3.0) reconciles a TrainJob that is being deleted like any other: under a Foreground
    # delete it applies the JobSet again each time the garbage collector deletes it (new Jobs, new pods),
    # for many seconds (tests/real/test_real_trainer.py). Background removes the TrainJob at once.
    delete_propagation="Background",
)

KINDS: tuple[JobKind, ...] = (TRAIN_JOB,)

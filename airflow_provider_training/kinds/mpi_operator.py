"""The standalone MPI Operator (kubeflow/mpi-operator): the ``kubeflow.org/v2beta1`` MPIJob.

It defines the same CRD name as the Training Operator's v1 MPIJob (``mpijobs.kubeflow.org``), so a cluster
serves one of the two versions; ``get_kind("MPIJob")`` stays the v1 one, this one is
``get_kind("MPIJob", "kubeflow.org/v2beta1")``.

Its status has the v1 shape (``conditions`` + ``replicaStatuses`` Launcher/Worker), read by the v1 reader
(:func:`~airflow_provider_training.kinds.kubeflow.layout_status`); the reasons are ``MPIJobCreated``,
``MPIJobRunning``, ``MPIJobSucceeded``, ``MPIJobFailed`` (or the launcher batch Job's own, e.g.
``BackoffLimitExceeded/Error``), ``MPIJobSuspended``, ``MPIJobResumed``, ``MPIJobEvicted``.

The launcher is a batch/v1 Job ``<name>-launcher`` whose pod has a generated name
(``<name>-launcher-xxxxx``); workers are pods ``<name>-worker-<i>``. Pods carry
``training.kubeflow.org/operator-name=mpi-operator``, ``job-name``, ``job-role=launcher|worker`` and, on
workers only, ``replica-index`` (from 1 with ``runLauncherAsWorker``, when the launcher gets ``0``); there is
no ``replica-type`` label. The operator records no per-pod exit-code events, so no replica is ever derived
from a pod's name: failures come from the pods themselves.
"""

from __future__ import annotations

from functools import partial

from airflow_provider_training.kinds.base import JobKind, RawObject, ReplicaPod, ResourceRef
from airflow_provider_training.kinds.common import label_selector, parse_index, pod_labels
from airflow_provider_training.kinds.kubeflow import (
    GROUP,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    Layout,
    layout_status,
    suspend_patch,
)

VERSION = "v2beta1"
FAMILY = "mpi-operator"
OPERATOR_NAME = "mpi-operator"
LAUNCHER, WORKER = "Launcher", "Worker"
ROLES = {"launcher": LAUNCHER, "worker": WORKER}  # the job-role label's values

LAYOUT = Layout(
    "MPIJob",
    "mpijobs",
    "mpiReplicaSpecs",
    (LAUNCHER, WORKER),
    # The operator imposes no container name; upstream examples call the launcher's "mpi-launcher" (the log
    # streamer reads a pod's first container when it has none of this name, as for every worker).
    "mpi-launcher",
    deciding=(LAUNCHER,),
    zero_by_default=(WORKER,),
)

NO_STATUS_CAUSES = (
    "the MPI Operator (the mpi-operator deployment, kubeflow/mpi-operator) seems not to be running. Other "
    "causes: the job failed validation, for which the operator writes no condition and only emits a Warning "
    "event ValidationError (see the job's events); or runPolicy.managedBy is kueue.x-k8s.io/multikueue, so "
    "another cluster runs it"
)


read_status = partial(layout_status, LAYOUT, NO_STATUS_CAUSES)
"""The v1 reader's rules: the first true condition of Failed, Succeeded, Suspended, Restarting, Running,
Created decides; no conditions is PENDING, ``stalled`` past the grace period naming the MPI Operator."""


def pod_selector(job_name: str) -> str:
    """The launcher's and the workers' pods (the operator-name keeps v1 MPIJobs' pods of that name out)."""
    return label_selector({OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: job_name})


def master_selector(job_name: str) -> str:
    return f"{pod_selector(job_name)},{JOB_ROLE_LABEL}=launcher"


def replica_of_pod(pod: RawObject) -> ReplicaPod:
    """Launcher or Worker from ``job-role``; the worker's index from ``replica-index`` (the launcher, one of a
    kind, has none, also when ``runLauncherAsWorker`` labels it ``0``)."""
    labels = pod_labels(pod)
    role = labels.get(JOB_ROLE_LABEL, "")
    replica_type = ROLES.get(role, role)
    return ReplicaPod(
        replica_type=replica_type,
        index=None if replica_type == LAUNCHER else parse_index(labels.get(REPLICA_INDEX_LABEL)),
        name=(pod.get("metadata") or {}).get("name", ""),
    )


MPI_JOB = JobKind(
    resource=ResourceRef(GROUP, VERSION, LAYOUT.plural, LAYOUT.kind),
    family=FAMILY,
    replica_types=LAYOUT.replica_types,
    default_container=LAYOUT.default_container,
    read_status=read_status,
    pod_selector=pod_selector,
    master_selector=master_selector,
    replica_of_pod=replica_of_pod,
    replica_spec_key=LAYOUT.replica_spec_key,
    suspend_patch=suspend_patch,  # spec.runPolicy.suspend, as in v1
    deciding_replicas=LAYOUT.deciding,
    pod_watch_selectors=(label_selector({OPERATOR_NAME_LABEL: OPERATOR_NAME}),),
)

KINDS: tuple[JobKind, ...] = (MPI_JOB,)

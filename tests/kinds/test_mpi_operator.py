"""The MPI Operator's kubeflow.org/v2beta1 MPIJob read from statuses and pods shaped as its controller
(kubeflow/mpi-operator ``pkg/controller/mpi_job_controller*.go``) writes and labels them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from localkube.selectors import labels_match, parse_label_selector

from airflow_provider_training.kinds import JobState, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING

MPI = get_kind("MPIJob", "kubeflow.org/v2beta1")
AT = "2026-11-30T08:05:00Z"
LATE = datetime(2026, 11, 30, 8, 2, 0, tzinfo=UTC)


def cond(type_: str, reason: str, status: str = "True") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": AT}


def mpi_job(status: dict[str, Any] | None = None, workers: int | None = 2) -> dict[str, Any]:
    worker = {} if workers is None else {"replicas": workers}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "creationTimestamp": "2026-11-30T08:00:00Z"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {}, "Worker": worker}},
        **({} if status is None else {"status": status}),
    }


def pod(role: str, index: str | None = None, name: str = "pi-launcher-x7k2p") -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": role,
    }
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = index
    return {"metadata": {"name": name, "labels": labels}}


def test_get_kind_without_a_version_stays_the_v1_mpijob():
    assert get_kind("MPIJob").api_version == "kubeflow.org/v1"
    assert (MPI.api_version, MPI.resource.plural, MPI.family) == (
        "kubeflow.org/v2beta1",
        "mpijobs",
        "mpi-operator",
    )


def test_the_v1_readers_rules_with_the_mpi_operators_reasons():
    failed = {
        "conditions": [
            cond("Created", "MPIJobCreated"),
            cond("Running", "MPIJobRunning", "False"),
            cond("Failed", "BackoffLimitExceeded/Error"),
        ],
        "replicaStatuses": {"Launcher": {"failed": 1}, "Worker": {"active": 2}},
    }
    status = MPI.status(mpi_job(failed))
    assert (status.state, status.reason) == (JobState.FAILED, "BackoffLimitExceeded/Error")
    assert status.replicas["Worker"].failed == 2  # no longer active once the job failed
    assert (
        MPI.status(mpi_job({"conditions": [cond("Suspended", "MPIJobSuspended")]})).state
        == JobState.SUSPENDED
    )
    assert (
        MPI.status(mpi_job({"conditions": [cond("Succeeded", "MPIJobSucceeded")]})).state
        == JobState.SUCCEEDED
    )


def test_desired_replicas_default_to_one_launcher_and_no_workers():
    status = MPI.status(mpi_job(workers=None))
    assert {t: c.desired for t, c in status.replicas.items()} == {"Launcher": 1, "Worker": 0}


def test_no_status_past_the_grace_period_names_the_mpi_operator_and_managed_by():
    from airflow_provider_training.kinds.mpi_operator import read_status

    status = read_status(mpi_job(), now=LATE)
    assert (status.stalled, status.reason) == (True, OPERATOR_NOT_RUNNING)
    assert "mpi-operator deployment" in status.message and "runPolicy.managedBy" in status.message


def test_pods_are_identified_by_role_and_index_never_by_name():
    launcher = MPI.replica_of_pod(pod("launcher", "0"))  # runLauncherAsWorker labels it 0
    worker = MPI.replica_of_pod(pod("worker", "1", name="pi-worker-1"))
    assert (launcher.replica_type, launcher.index, launcher.name) == ("Launcher", None, "pi-launcher-x7k2p")
    assert (worker.replica_type, worker.index) == ("Worker", 1)


def test_selectors_find_the_operators_pods_and_the_launcher():
    def selected(selector: str, obj: dict[str, Any]) -> bool:
        return labels_match(parse_label_selector(selector), obj)

    launcher, worker = pod("launcher"), pod("worker", "0", name="pi-worker-0")
    v1_pod = {
        "metadata": {
            "labels": {
                **worker["metadata"]["labels"],
                "training.kubeflow.org/operator-name": "mpijob-controller",
            }
        }
    }
    assert selected(MPI.pod_selector("pi"), launcher) and selected(MPI.pod_selector("pi"), worker)
    assert not selected(MPI.pod_selector("pi"), v1_pod)
    assert selected(MPI.master_selector("pi"), launcher) and not selected(MPI.master_selector("pi"), worker)
    assert all(selected(s, launcher) for s in MPI.pod_watch_selectors)


def test_deciding_replica_suspend_patch_and_default_container():
    assert MPI.deciding_replica(mpi_job()) == "Launcher"
    assert MPI.suspend_patch(True) == {"spec": {"runPolicy": {"suspend": True}}}
    assert MPI.default_container == "mpi-launcher"
    assert MPI.failures_in_events("pi", [{"message": "Pod: default.pi-launcher exited with code 1"}]) == []

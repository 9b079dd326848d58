"""MPIJobV2Beta1Operator against the MPI Operator's status shapes, written by hand: localkube over HTTP with
the kubeflow.org/v2beta1 CRD loaded (tests/fixtures/crds) and no controller.

The acceptance table (success, failure, deleted while waiting, reattach, on_kill, suspend and resume, the
sensor) runs on localkube's MPI Operator controller with the other families' (``MPI_OPERATOR_CASE`` in
tests/operators/families.py). What stays here is what that controller does not produce: the real
operator's failure shapes (the launcher Job's ``BackoffLimitExceeded/Error``, a worker's ``MPIJobFailed``),
a job no operator ever answers, and a cluster serving the v1 MPIJob. Each test writes the MPIJob's status and
its pods (the worker pods ``<job>-worker-<i>``, the launcher batch Job's pod ``<job>-launcher-<suffix>``,
labelled as the MPI Operator labels them) itself, after the task submitted or deferred: no step bets on
timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from localkube.resources import PODS

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.operators import (
    MPIJobV2Beta1Operator,
)
from airflow_provider_training.results import TrainingJobError
from tests.fixtures import CRDS
from tests.operators.harness import NAMESPACE, make_context, run_driven, sent_since

pytestmark = pytest.mark.timeout(60)
API = "kubeflow.org/v2beta1"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube serving mpijobs.kubeflow.org in v2beta1, no controller and no pod runtime."""
    cluster = LocalKube(runtime="none", controllers=[], crd_dir=CRDS / "kubeflow.org-v2beta1")
    with cluster, pytest.MonkeyPatch.context() as mp:
        path = cluster.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        mp.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(path))
        yield cluster


def mpi_jobs(kube: LocalKube) -> Any:
    return kube.store.resource_type("kubeflow.org", "v2beta1", "mpijobs")


def operator(**options: Any) -> MPIJobV2Beta1Operator:
    options.setdefault("get_logs", False)
    launcher = {"name": "mpi-launcher", "image": "mpioperator/mpi-pi:openmpi", "command": ["mpirun"]}
    worker = {"name": "mpi-worker", "image": "mpioperator/mpi-pi:openmpi", "command": ["/usr/sbin/sshd"]}
    job = {
        "apiVersion": API,
        "kind": "MPIJob",
        "metadata": {"generateName": "pi-"},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }
    return MPIJobV2Beta1Operator(task_id="mpi", job=job, check_interval=0.1, **options)


def add_pod(
    kube: LocalKube, job: str, role: str, index: int | None, phase: str, exit_code: int | None
) -> str:
    """A pod as the MPI Operator makes it: a worker ``<job>-worker-<i>``, or the launcher Job's pod."""
    name = f"{job}-worker-{index}" if role == "worker" else f"{job}-launcher-q7zx4"
    container = f"mpi-{role}"
    labels = {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/job-role": role,
    }
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = str(index)
    spec = {
        "containers": [{"name": container, "image": "mpioperator/mpi-pi:openmpi"}],
        "restartPolicy": "Never",
    }
    kube.store.create(PODS, NAMESPACE, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    kube.logs.start_container(NAMESPACE, name, container)
    kube.logs.write(NAMESPACE, name, container, f"{role}: pi is approximately 3.1416\n")
    if exit_code:
        kube.logs.write(NAMESPACE, name, container, "mpirun detected that one or more processes exited\n")
    if exit_code is not None:
        kube.logs.close_container(NAMESPACE, name, container)
    state = (
        {"running": {"startedAt": "2026-11-30T08:01:00Z"}}
        if exit_code is None
        else {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}
    )
    status = {"phase": phase, "containerStatuses": [{"name": container, "state": state, "restartCount": 0}]}
    kube.store.update_status(PODS, NAMESPACE, name, status)
    return name


def condition(type_: str, reason: str, message: str = "") -> dict[str, Any]:
    at = "2026-11-30T08:05:00Z"
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}


def set_status(kube: LocalKube, job: str, conditions: list[dict[str, Any]], **replicas: Any) -> None:
    kube.store.update_status(
        mpi_jobs(kube), NAMESPACE, job, {"conditions": conditions, "replicaStatuses": replicas}
    )


def fail_launcher(kube: LocalKube, job: str) -> None:
    for index in (0, 1):
        add_pod(kube, job, "worker", index, "Running", None)
    add_pod(kube, job, "launcher", None, "Failed", 137)
    failed = condition("Failed", "BackoffLimitExceeded/Error", "Job has reached the specified backoff limit")
    set_status(kube, job, [failed], Launcher={"failed": 1}, Worker={"active": 2})


def fail_worker(kube: LocalKube, job: str) -> None:
    add_pod(kube, job, "worker", 0, "Running", None)
    add_pod(kube, job, "worker", 1, "Failed", 3)
    add_pod(kube, job, "launcher", None, "Running", None)
    failed = condition("Failed", "MPIJobFailed", f"worker pod {job}-worker-1 failed")
    set_status(kube, job, [failed], Launcher={"active": 1}, Worker={"active": 1, "failed": 1})


MODES = ["sync", "deferrable"]


@pytest.mark.parametrize("mode", MODES)
def test_launcher_failure_names_the_launcher_pod_and_its_exit_code(kube, mode):
    with pytest.raises(TrainingJobError) as failure:
        run_driven(operator(get_logs=True), mode, lambda job: fail_launcher(kube, job))

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "reason BackoffLimitExceeded/Error" in message
    assert (
        "Launcher (pod " in message and "-launcher-q7zx4, container mpi-launcher): exit code 137" in message
    )
    assert "| mpirun detected that one or more processes exited" in message
    assert "worker-0" not in message  # still running: not a failing replica


@pytest.mark.parametrize("mode", MODES)
def test_worker_failure_names_the_worker_and_its_exit_code(kube, mode):
    with pytest.raises(TrainingJobError) as failure:
        run_driven(operator(), mode, lambda job: fail_worker(kube, job))

    message = str(failure.value)
    assert "reason MPIJobFailed" in message
    assert "worker-1 (pod " in message and "container mpi-worker): exit code 3" in message


@pytest.mark.parametrize("mode", MODES)
def test_no_status_past_the_grace_period_names_the_mpi_operator(kube, monkeypatch, mode):
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "1")

    with pytest.raises(TrainingJobError) as failure:
        run_driven(operator(), mode, lambda job: None)

    assert failure.value.event["job_status"]["reason"] == "OperatorNotRunning"
    assert "mpi-operator deployment" in str(failure.value)


def test_a_cluster_that_serves_the_v1_mpijob_is_named_before_anything_is_created(
    tmp_path_factory, monkeypatch
):
    """One CRD name, two releases: localkube's own kubeflow.org types serve mpijobs in v1 only."""
    with LocalKube(runtime="none", controllers=[]) as v1_cluster:
        path = v1_cluster.write_kubeconfig(tmp_path_factory.mktemp("v1") / "kubeconfig")
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(path))

        with pytest.raises(KubeApiError) as failure:
            operator(deferrable=False).execute(make_context())
        sent = sent_since(v1_cluster, 0)

    assert failure.value.served_in == ["v1"]
    assert "this cluster serves mpijobs.kubeflow.org in v1, not in v2beta1" in str(failure.value)
    assert not [line for line in sent if line.startswith("POST ")]

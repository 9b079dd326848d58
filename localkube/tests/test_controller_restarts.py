"""Restarts of every kind's leader replica (the one that decides success) under `restartPolicy: ExitCode`
(kubeflow-v1.md §1 "How ExitCode works"): a retryable exit code (>= 128) deletes and recreates the pod and
shows Restarting, then the job goes on to Succeeded; a permanent one fails the job at once. The MPIJob
controller of TO-1.9 has a ReconcilePods of its own that never deletes or recreates a failed pod: a failed
launcher or worker under ExitCode only makes the job Restarting (held to the real operator's recording by
tests/operators/test_emulation_vs_real_operator.py). Observed through the real client."""

from __future__ import annotations

import uuid

import pytest
from localkube.gates import open_gate
from test_controller_support import (
    KubeClient,
    conditions,
    is_true,
    job,
    kc,
    replica,
)

__all__ = ["kc"]

RETRY_THEN_SUCCEED = {"attempts": [{"exit_code": 137, "logs": []}, {"exit_code": 0}]}
EXIT_CODE = "ExitCode"


def leader_case(kind: str, container: str, leader: str, *others: str) -> object:
    """The leader (index 0) with restartPolicy ExitCode next to one replica of each other type."""
    specs = {leader: replica(container, 1, EXIT_CODE), **{t: replica(container, 1) for t in others}}
    return pytest.param(kind, specs, leader, f"{leader.lower()}-0", id=kind)


# kind, replica specs, the leader's script selector, its pod name after the job name
LEADERS = [
    leader_case("TFJob", "tensorflow", "Chief", "Worker"),
    leader_case("PyTorchJob", "pytorch", "Master", "Worker"),
    leader_case("XGBoostJob", "xgboost", "Master", "Worker"),
    leader_case("PaddleJob", "paddle", "Master", "Worker"),
    leader_case("MXJob", "mxnet", "Scheduler", "Server", "Worker"),
    pytest.param("JAXJob", {"Worker": replica("jax", 2, EXIT_CODE)}, "Worker-0", "worker-0", id="JAXJob"),
]


def created_count(kc: KubeClient, job_name: str, pod: str) -> int:
    """How often the operator created the pod (repeated events are counted on one Event)."""
    return sum(
        int(e.count or 1)
        for e in kc.events(job_name)
        if e.reason == "SuccessfulCreatePod" and e.message == f"Created pod: {pod}"
    )


@pytest.mark.parametrize(("kind", "specs", "selector", "suffix"), LEADERS)
def test_leader_retryable_exit_code_is_recreated_then_succeeds(
    kc: KubeClient, kind: str, specs: dict, selector: str, suffix: str
) -> None:
    name = f"lead-{kind.lower()}"
    kc.create(job(kind, name, specs, script={selector: RETRY_THEN_SUCCEED}))
    seen = kc.watch_job(kind, name, lambda j: is_true(j, "Succeeded"))
    restarting = [s for s in seen if is_true(s, "Restarting")]
    assert restarting, f"{kind} never showed Restarting: {[conditions(s) for s in seen]}"
    assert conditions(restarting[0])[-1] == ("Restarting", "True", f"{kind}Restarting")
    assert conditions(seen[-1])[-1] == ("Succeeded", "True", f"{kind}Succeeded")
    pod_name = f"{name}-{suffix}"
    leader = kc.wait_pod(pod_name, lambda p: p.status.phase == "Succeeded")
    assert leader.status.container_statuses[0].restart_count == 0  # a new pod, not an in-place restart
    assert created_count(kc, name, pod_name) == 2
    assert f"Deleted pod: {pod_name}" in [e.message for e in kc.events(name)]


def test_mpijob_failed_launcher_under_exit_code_is_restarting_and_not_recreated(kc: KubeClient) -> None:
    specs = {"Launcher": replica("mpi", 1, EXIT_CODE, command=["mpirun"]), "Worker": replica("mpi", 1)}
    kc.create(job("MPIJob", "mpi-perm", specs, script={"Launcher": {"exit_code": 3}}))
    restarting = kc.wait_condition("MPIJob", "mpi-perm", "Restarting")
    assert conditions(restarting)[-1] == ("Restarting", "True", "MPIJobRestarting")
    message = restarting["status"]["conditions"][-1]["message"]
    assert message == "MPIJob mpi-perm is restarting because 1 Launcher replica(s) failed."
    launcher = kc.read_pod("mpi-perm-launcher")
    assert launcher is not None and launcher.status.phase == "Failed"  # kept, not recreated
    assert created_count(kc, "mpi-perm", "mpi-perm-launcher") == 1
    assert "ExitedWithCode" not in kc.reasons("mpi-perm")


def test_mpijob_failed_worker_under_exit_code_is_not_recreated(kc: KubeClient) -> None:
    specs = {
        "Launcher": replica("mpi", 1, command=["mpirun"]),
        "Worker": replica("mpi", 1, EXIT_CODE),
    }
    gate = f"mpi-worker-{uuid.uuid4().hex[:8]}"
    script = {"Launcher": {"gate": gate}, "Worker": RETRY_THEN_SUCCEED}
    kc.create(job("MPIJob", "mpi-worker", specs, script=script))
    kc.wait_condition("MPIJob", "mpi-worker", "Restarting")
    open_gate(gate)  # the launcher ends once the worker's failure made the job Restarting
    kc.wait_condition("MPIJob", "mpi-worker", "Succeeded")
    assert created_count(kc, "mpi-worker", "mpi-worker-worker-0") == 1
    worker = kc.read_pod("mpi-worker-worker-0")
    assert worker is not None and worker.status.phase == "Failed"

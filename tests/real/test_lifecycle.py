"""What a real control plane does differently from localkube's server: graceful pod deletion (the agent, as
kubelet, finishes it), foreground deletion of a job whose pods kube-controller-manager's garbage collector
removes, pods recreated under the same name after a restart, merge patches of custom objects
(suspend/resume), and the startup timeout of a job whose pods never schedule."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred
from localkube.realcluster import RealCluster

from airflow_provider_training.operators import (
    PyTorchJobOperator,
    TrainingJobResumeOperator,
    TrainingJobSuspendOperator,
)
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KIND_BY_NAME, in_thread, make_context, manifest, run_operator

pytestmark = pytest.mark.timeout(180)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
FOREVER = {"default": {"duration": None}}
QUICK = {"default": {"duration": 0.3, "logs": ["done"]}}
JOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"


def operator(name: str, script, **kwargs) -> PyTorchJobOperator:
    kwargs.setdefault("check_interval", 0.2)
    return PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, script, name=name, **kwargs.pop("job", {})), **kwargs
    )


def job(cluster: RealCluster, name: str) -> dict | None:
    return cluster.get_or_none(f"{JOBS}/{name}")


def pods(cluster: RealCluster, name: str) -> list[dict]:
    selector = f"training.kubeflow.org/job-name={name}"
    return list(cluster.get(f"/api/v1/namespaces/default/pods?labelSelector={selector}")["items"])


def running(cluster: RealCluster, name: str) -> bool:
    found = pods(cluster, name)
    return len(found) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in found)


def conditions(cluster: RealCluster, name: str) -> dict[str, str]:
    status = (job(cluster, name) or {}).get("status") or {}
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


def test_on_kill_deletes_the_job_and_the_garbage_collector_its_pods(real_cluster, admin_conn):
    op = operator("real-kill", FOREVER)
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    real_cluster.wait_for(lambda: running(real_cluster, "real-kill"), 60)

    op.on_kill()
    worker.join(timeout=90)

    assert isinstance(outcome.get("error"), TrainingJobError), outcome
    assert outcome["error"].status == "deleted"
    real_cluster.wait_for(lambda: job(real_cluster, "real-kill") is None, 60)
    real_cluster.wait_for(lambda: not pods(real_cluster, "real-kill"), 60)


def test_on_kill_of_a_deferred_task_is_the_triggers(real_cluster, admin_conn):
    with pytest.raises(TaskDeferred) as deferred:
        operator("real-kill-deferred", FOREVER, deferrable=True).execute(make_context())
    real_cluster.wait_for(lambda: running(real_cluster, "real-kill-deferred"), 60)

    asyncio.run(deferred.value.trigger.on_kill())

    real_cluster.wait_for(lambda: job(real_cluster, "real-kill-deferred") is None, 60)
    real_cluster.wait_for(lambda: not pods(real_cluster, "real-kill-deferred"), 60)


def test_on_finish_action_delete(real_cluster, admin_conn):
    op = operator("real-finish", QUICK, on_finish_action="delete")

    assert run_operator(op, make_context(), "deferrable")["state"] == "Succeeded"

    real_cluster.wait_for(lambda: job(real_cluster, "real-finish") is None, 60)
    real_cluster.wait_for(lambda: not pods(real_cluster, "real-finish"), 60)


def test_a_killed_master_is_restarted_under_its_name_and_the_job_succeeds(real_cluster, admin_conn, capsys):
    attempts = [{"duration": 0.5, "exit_code": 137, "logs": ["killed"]}, {"duration": 0.5, "logs": ["again"]}]
    script = {"default": {"duration": 3}, "Master": {"attempts": attempts}}
    op = operator("real-restart", script, job={"restart_policy": "ExitCode"})

    result = run_operator(op, make_context(), "sync")

    assert result["state"] == "Succeeded"
    out = capsys.readouterr().out
    assert "default/real-restart is Restarting" in out
    assert "[master-0] killed" in out and "[master-0] again" in out  # both incarnations of master-0
    assert "could not be read" not in out  # tests/test_logs.py: the final read may find the next incarnation


def test_suspend_and_resume_patch_the_job(real_cluster, admin_conn):
    real_cluster.apply(manifest(PYTORCH, FOREVER, name="real-suspend", namespace="default"))
    real_cluster.wait_for(lambda: running(real_cluster, "real-suspend"), 60)

    TrainingJobSuspendOperator(task_id="suspend", job_name="real-suspend", kind="PyTorchJob").execute(
        make_context()
    )
    real_cluster.wait_for(lambda: conditions(real_cluster, "real-suspend").get("Suspended") == "True", 60)
    real_cluster.wait_for(lambda: not pods(real_cluster, "real-suspend"), 60)
    TrainingJobResumeOperator(task_id="resume", job_name="real-suspend", kind="PyTorchJob").execute(
        make_context()
    )
    real_cluster.wait_for(lambda: running(real_cluster, "real-suspend"), 60)

    assert conditions(real_cluster, "real-suspend").get("Suspended") != "True"
    real_cluster.request("DELETE", f"{JOBS}/real-suspend")


def test_startup_timeout_when_pods_never_schedule(real_cluster, admin_conn):
    op = operator("real-stuck", {"default": {"pending": "Unschedulable"}}, startup_timeout=2.0)

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), "deferrable")

    assert failure.value.status == "timeout"
    assert "Unschedulable" in str(failure.value)
    real_cluster.wait_for(lambda: job(real_cluster, "real-stuck") is None, 60)


class WorkerDiesBeforeDefer(PyTorchJobOperator):
    """The first try: the job is created, then the worker is lost before the task defers."""

    def defer(self, **kwargs):
        raise RuntimeError("worker lost")


@pytest.mark.parametrize("store", ["state store", "store cleared"])
def test_a_retry_reattaches_to_the_job_of_the_first_try(real_cluster, admin_conn, store):
    from airflow_provider_training.submission import STATE_KEY

    name = f"real-retry-{store[:5]}"
    job = manifest(PYTORCH, {"default": {"duration": 2}}, name=name)
    first = make_context()
    with pytest.raises(RuntimeError, match="worker lost"):
        WorkerDiesBeforeDefer(task_id="train", job=job, deferrable=True, check_interval=0.2).execute(first)
    created = job_of(real_cluster, name)
    if store == "store cleared":  # the identity labels, listed by selector, still find it
        first["task_state_store"].delete(STATE_KEY)
    retry = make_context(run_id=first["run_id"], store=first["task_state_store"], try_number=2)

    result = run_operator(operator(name, {"default": {"duration": 2}}), retry, "deferrable")

    assert result["state"] == "Succeeded" and result["uid"] == created["metadata"]["uid"]


def job_of(cluster: RealCluster, name: str) -> dict:
    found = job(cluster, name)
    assert found is not None
    return found

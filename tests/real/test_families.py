"""EDL, both legacy MXNet lineages, every T9k kind and the MPI Operator's v2beta1 MPIJob (``FAMILY_CASES``)
end to end on a real kube-apiserver, etcd and kube-controller-manager, with the CRDs written from the
reference documents (upstream's for the MPIJob) and localkube's agent as their operators and kubelet. For
each kind, in sync and deferrable mode: success
(a replica's log line read through the API server's pods/log proxy), failure naming the deciding replica and
its exit code, the job deleted while waiting, on_kill; a retry that reattaches to the first try's job; and
success as the ServiceAccount bound to exactly the Role of docs/rbac.md.

Intermediate states are reached with gates: a replica writes its logs, then waits until the test opens its
gate (a ConfigMap the agent's gate controller reads) once the task log shows what the test waits for.
"""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_training import naming
from airflow_provider_training.results import TrainingJobError
from tests.operators.families import KUBEFLOW_CASES, FamilyCase, kill
from tests.operators.harness import MODES, first_event, in_thread, make_context, run_operator
from tests.real.families_real import (
    FAMILY_CASES,
    gate_name,
    gone,
    job_or_none,
    jobs_path,
    names,
    open_gate,
    run_until_logged,
    running,
)
from tests.real.test_kinds import logged

pytestmark = pytest.mark.timeout(300)
FOREVER = {"default": {"duration": None}}


def succeeding(case: FamilyCase, gate: str) -> dict:
    """Every replica logs, then exits 0 once ``gate`` opens (EDL: the trainer; its pservers and master are
    ReplicaSets that run until deleted)."""
    step = {"duration": 0, "logs": ["epoch 1 loss 0.5", "{type}-{index} saved model"], "gate": gate}
    if case.decider == "trainer":
        return {"default": {"duration": None}, "trainer": step}
    return {"default": step}


def failing(case: FamilyCase, gate: str) -> dict:
    """The deciding replica logs, then exits 3 once ``gate`` opens, while the others still run."""
    logs = ["loading shards", "RuntimeError: shard 7 is corrupt"]
    return {
        "default": {"duration": None},
        case.decider: {"duration": 0, "exit_code": 3, "logs": logs, "gate": gate},
    }


# The lifecycle tests run over every family: the Kubeflow v1 kinds on the session's main cluster.
EVERY_FAMILY = [*KUBEFLOW_CASES, *FAMILY_CASES]


@pytest.fixture
def cluster(request, case: FamilyCase):
    """The cluster serving ``case``'s kind: the main one for Kubeflow v1, else the families' cluster."""
    return request.getfixturevalue("real_cluster" if case.kubeflow else "legacy_cluster")


@pytest.fixture
def conn(request, case: FamilyCase) -> str:
    """``kubernetes_default`` as admin of ``cluster``; returns the jobs' namespace."""
    if case.kubeflow:
        request.getfixturevalue("admin_conn")
        return "default"
    return str(request.getfixturevalue("legacy_admin_conn"))


def owned(cluster, case: FamilyCase, context: dict, namespace: str) -> list[str]:
    identity = naming.TaskIdentity.from_context(context)
    return [
        n
        for n in names(cluster, case, namespace)
        if identity.owns(job_or_none(cluster, case, n, namespace) or {})
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_success_with_a_replica_log_line(legacy_cluster, legacy_admin_conn, case, mode, capsys):
    gate = gate_name("success", case, mode)
    op = case.make_operator(succeeding(case, gate), on_finish_action="delete")

    result, out = run_until_logged(
        capsys,
        lambda: run_operator(op, make_context(), mode),
        ("saved model", lambda: open_gate(legacy_cluster, gate)),
    )

    assert result["state"] == "Succeeded"
    assert (result["kind"], result["api_version"]) == (case.job_kind.kind, case.job_kind.api_version)
    assert result["pods"] and all(pod.startswith(result["name"]) for pod in result["pods"])
    assert any(line.startswith("[") and "saved model" in line for line in logged(out)), (
        out
    )  # a replica's line
    gone(legacy_cluster, case, result["name"], legacy_admin_conn)  # on_finish_action="delete"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_failure_names_the_deciding_replica_and_its_exit_code(
    legacy_cluster, legacy_admin_conn, case, mode, capsys
):
    gate = gate_name("failure", case, mode)
    op = case.make_operator(failing(case, gate), on_finish_action="delete")

    with pytest.raises(TrainingJobError) as failure:
        run_until_logged(
            capsys,
            lambda: run_operator(op, make_context(), mode),
            ("shard 7 is corrupt", lambda: open_gate(legacy_cluster, gate)),
        )

    message = str(failure.value).lower()
    assert failure.value.status == "failed"
    assert f"{case.decider_text} (pod " in message and "exit code 3" in message
    assert "runtimeerror: shard 7 is corrupt" in message  # the deciding replica's last log line
    gone(legacy_cluster, case, op._job_ref.name, legacy_admin_conn)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", EVERY_FAMILY, ids=str)
def test_deleted_while_waiting_is_a_clear_failure(cluster, conn, case, mode, capsys):
    op = case.make_operator(FOREVER)

    def delete() -> None:
        cluster.request("DELETE", f"{jobs_path(case, conn)}/{op._job_ref.name}")

    with pytest.raises(TrainingJobError) as failure:
        run_until_logged(capsys, lambda: run_operator(op, make_context(), mode), (" is Running", delete))

    assert failure.value.status == "deleted"
    assert "was deleted while waiting" in str(failure.value)
    asyncio.run(kill(case, op._job_ref.name))  # EDL's children outlive their job
    gone(cluster, case, op._job_ref.name, conn)


class _WorkerLost(RuntimeError):
    pass


@pytest.mark.parametrize("case", EVERY_FAMILY, ids=str)
def test_a_retry_after_a_lost_worker_follows_the_first_tries_job(cluster, conn, case, capsys):
    def defer(self, **kwargs):
        raise _WorkerLost("worker lost")

    gate = gate_name("retry", case)
    script = succeeding(case, gate)
    dying = type("Dying", (case.operator,), {"defer": defer})
    first = make_context()
    with pytest.raises(_WorkerLost):
        dying(task_id="train", job=case.manifest(script), deferrable=True, **case.options).execute(first)
    (created,) = owned(cluster, case, first, conn)
    uid = job_or_none(cluster, case, created, conn)["metadata"]["uid"]

    retry = make_context(run_id=first["run_id"], store=first["task_state_store"], try_number=2)
    op = case.make_operator(script, deferrable=True, on_finish_action="delete")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(retry)
    assert deferred.value.trigger.job_wait.job.name == created
    assert owned(cluster, case, retry, conn) == [created]  # no second job
    open_gate(cluster, gate)
    event = first_event(deferred.value.trigger)
    result = op.resume_execution(
        deferred.value.method_name, {**(deferred.value.kwargs or {}), "event": event}, retry
    )

    assert result["state"] == "Succeeded" and result["name"] == created and result["uid"] == uid
    gone(cluster, case, created, conn)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", EVERY_FAMILY, ids=str)
def test_on_kill_deletes_the_job_and_its_children(cluster, conn, case, mode):
    op = case.make_operator(FOREVER)
    ns = conn
    if mode == "sync":
        worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
        name = cluster.wait_for(
            lambda: op._job_ref and running(cluster, case, op._job_ref.name, ns) and op._job_ref.name,
            90,
        )
        op.on_kill()
        worker.join(timeout=120)
        assert isinstance(outcome.get("error"), TrainingJobError), outcome
        assert outcome["error"].status == "deleted"
    else:
        with pytest.raises(TaskDeferred) as deferred:
            op.deferrable = True
            op.execute(make_context())
        name = deferred.value.trigger.job_wait.job.name
        cluster.wait_for(lambda: running(cluster, case, name, ns), 90)
        asyncio.run(deferred.value.trigger.on_kill())

    gone(cluster, case, name, ns)


@pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
def test_as_the_documented_role_to_success(legacy_cluster, legacy_sa_conn, case, capsys):
    gate = gate_name("rbac", case)
    op = case.make_operator(succeeding(case, gate), on_finish_action="delete")

    result, out = run_until_logged(
        capsys,
        lambda: run_operator(op, make_context(), "deferrable"),
        ("saved model", lambda: open_gate(legacy_cluster, gate)),
    )

    assert result["state"] == "Succeeded" and result["namespace"] == legacy_sa_conn
    assert "saved model" in out
    assert "forbidden" not in out.lower()
    gone(legacy_cluster, case, result["name"], legacy_sa_conn)

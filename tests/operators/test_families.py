"""Issue 4 acceptance: every kind of the PaddlePaddle EDL, legacy MXNet and T9k APIs (and issue 13's MPI
Operator v2beta1 MPIJob) through its thin operator, in sync and deferrable mode, against localkube over HTTP.
One parametrized table per scenario:
success; failure naming the deciding replica and its exit code; deleted while waiting; reattach on retry;
cleanup that leaves no child behind. Plus what only one family does: EDL's status from its children alone,
T9k's Completed=True on failure and its debug mode.
"""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_training import naming
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.specs import SpecError
from tests.operators.families import (
    LOCAL_CASES,
    T9K_CASES,
    family_cluster,
    job_or_none,
    kill,
    leftovers,
    names,
    running,
)
from tests.operators.harness import (
    MODES,
    NAMESPACE,
    in_thread,
    make_context,
    run_operator,
    run_until_logged,
    wait_for,
    watching,
)

__all__ = ["family_cluster"]
pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
FOREVER = {"default": {"duration": None}}


def failing(case, gate):
    """The deciding replica fails with exit code 3, once ``gate`` opens, while the others still run."""
    logs = ["loading shards", "RuntimeError: shard 7 is corrupt"]
    return {
        "default": {"duration": None},
        case.decider: {"duration": 0, "exit_code": 3, "logs": logs, "gate": gate},
    }


def owned(kube, case, context):
    identity = naming.TaskIdentity.from_context(context)
    return [n for n in names(kube, case) if identity.owns(job_or_none(kube, case, n) or {})]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_success(family_cluster, case, mode, capsys):
    # The replicas end once their logs were followed live: some APIs delete the pods as soon as the job ends.
    gate = f"success-{case}-{mode}"
    script = {"default": {"duration": 0, "logs": ["epoch 1 loss 0.5", "saved model"], "gate": gate}}
    if case.decider == "trainer":  # EDL's pservers and master are ReplicaSets: they run until deleted
        script = {"default": {"duration": None}, "trainer": script["default"]}
    op = case.make_operator(script, on_finish_action="delete")

    result, out = run_until_logged(
        capsys, lambda: run_operator(op, make_context(), mode), ("saved model", gate)
    )

    assert result["state"] == "Succeeded"
    assert (result["kind"], result["api_version"]) == (case.job_kind.kind, case.job_kind.api_version)
    assert result["pods"] and all(pod.startswith(result["name"]) for pod in result["pods"])
    assert "saved model" in out  # replica logs streamed into the task log
    wait_for(lambda: not leftovers(family_cluster, case, result["name"]))  # on_finish_action="delete"
    assert leftovers(family_cluster, case, result["name"]) == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_failure_names_the_deciding_replica_and_its_exit_code(family_cluster, case, mode, capsys):
    # The deciding replica exits once its last line was streamed: some APIs delete the pods at once.
    gate = f"failure-{case}-{mode}"
    # The job's own failure: a TrainJob's node restarts (JobSet's default OnFailure) up to its Job's
    # backoffLimit of 6, past the operators' default max_restarts (tests/operators/test_crash_loop.py).
    op = case.make_operator(failing(case, gate), on_finish_action="delete", max_restarts=None)

    with pytest.raises(TrainingJobError) as failure:
        run_until_logged(capsys, lambda: run_operator(op, make_context(), mode), ("shard 7 is corrupt", gate))

    message = str(failure.value).lower()
    assert failure.value.status == "failed"
    assert failure.value.event["job_status"]["state"] == "Failed"
    assert f"{case.decider_text} (pod " in message and "exit code 3" in message
    assert "runtimeerror: shard 7 is corrupt" in message  # the deciding replica's last log line


@pytest.mark.parametrize("case", T9K_CASES, ids=str)
def test_t9k_failure_carries_completed_and_failed_and_is_a_failure(family_cluster, case):
    gate = f"t9k-failure-{case}"
    op = case.make_operator(failing(case, gate))

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), "sync", gate=gate)

    job = job_or_none(family_cluster, case, op._job_ref.name)
    true = {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"}
    assert {"Completed", "Failed"} <= true  # the controller's real output on failure
    assert failure.value.status == "failed"
    asyncio.run(kill(case, op._job_ref.name))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_deleted_while_waiting_is_a_clear_failure(family_cluster, case, mode):
    op = case.make_operator(FOREVER)
    before, since = names(family_cluster, case), len(family_cluster.requests)

    def delete_when_running():
        name = wait_for(
            lambda: next(
                (n for n in names(family_cluster, case) - before if running(family_cluster, case, n)), None
            )
        )
        wait_for(lambda: watching(family_cluster, case, since))
        resource = case.job_kind.resource
        rt = family_cluster.store.resource_type(resource.group, resource.version, resource.plural)
        family_cluster.store.delete(rt, NAMESPACE, name)
        return name

    deleter, outcome = in_thread(delete_when_running)
    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)
    deleter.join()

    assert "error" not in outcome
    assert failure.value.status == "deleted"
    assert "was deleted while waiting" in str(failure.value)
    asyncio.run(kill(case, outcome["result"]))  # EDL's children outlive their job


class _WorkerLost(RuntimeError):
    pass


@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_worker_dying_before_defer_is_reattached_then_killed_without_leftovers(family_cluster, case):
    def defer(self, **kwargs):
        raise _WorkerLost("worker lost")

    dying = type("Dying", (case.operator,), {"defer": defer})
    first = make_context()
    with pytest.raises(_WorkerLost):
        dying(task_id="train", job=case.manifest(FOREVER), deferrable=True, **case.options).execute(first)
    created = owned(family_cluster, case, first)
    assert len(created) == 1

    retry = make_context(run_id=first["run_id"], store=first["task_state_store"], try_number=2)
    with pytest.raises(TaskDeferred) as deferred:
        case.make_operator(FOREVER, deferrable=True).execute(retry)

    assert owned(family_cluster, case, retry) == created  # exactly one job afterwards
    trigger = deferred.value.trigger
    assert trigger.job_wait.job.name == created[0]
    wait_for(lambda: running(family_cluster, case, created[0]))
    asyncio.run(trigger.on_kill())  # the deferred task is killed
    wait_for(lambda: not leftovers(family_cluster, case, created[0]))
    assert leftovers(family_cluster, case, created[0]) == []


@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_on_finish_action_delete_leaves_no_child(family_cluster, case):
    gate = f"finish-delete-{case}"
    op = case.make_operator(failing(case, gate), on_finish_action="delete")

    with pytest.raises(TrainingJobError):
        run_operator(op, make_context(), "deferrable", gate=gate)

    name = op._job_ref.name
    wait_for(lambda: not leftovers(family_cluster, case, name))
    assert leftovers(family_cluster, case, name) == []


@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_on_kill_in_sync_mode_leaves_no_child(family_cluster, case):
    op = case.make_operator(FOREVER)
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    name = wait_for(
        lambda: op._job_ref and running(family_cluster, case, op._job_ref.name) and op._job_ref.name
    )
    assert leftovers(family_cluster, case, name)  # the job and its children are there

    op.on_kill()
    worker.join()

    assert outcome["error"].status == "deleted"
    wait_for(lambda: not leftovers(family_cluster, case, name))
    assert leftovers(family_cluster, case, name) == []


@pytest.mark.parametrize("mode", MODES)
def test_edl_status_comes_from_its_children_alone(family_cluster, mode, capsys):
    case = next(c for c in LOCAL_CASES if c.decider == "trainer")
    gate = f"edl-trainer-{mode}"
    script = {"default": {"duration": None}, "trainer": {"duration": 0, "gate": gate}}
    op = case.make_operator(script)

    def run() -> dict:
        return run_operator(op, make_context(), mode)

    result, out = run_until_logged(capsys, run, (" is Running", gate))

    label = f"TrainingJob {NAMESPACE}/{result['name']} is"
    running_at, succeeded_at = out.find(f"{label} Running"), out.find(f"{label} Succeeded")
    assert 0 <= running_at < succeeded_at
    assert result["state"] == "Succeeded"
    assert not job_or_none(family_cluster, case, result["name"]).get("status")  # EDL never writes it
    asyncio.run(kill(case, result["name"]))


@pytest.mark.parametrize("case", T9K_CASES, ids=str)
def test_waiting_for_success_in_debug_mode_is_refused_before_submission(family_cluster, case):
    job = case.manifest(FOREVER)
    job["spec"]["runMode"] = {"debug": {"enabled": True}}
    op = case.operator(task_id="train", job=job, **case.options)
    requests = len(family_cluster.requests)

    with pytest.raises(SpecError, match="debug mode"):
        op.execute(make_context())

    assert len(family_cluster.requests) == requests
    running_op = case.operator(
        task_id="train", job=job, wait_until="Running", check_interval=0.2, **case.options
    )
    result = run_operator(running_op, make_context(), "deferrable")  # a debug job does reach Running
    assert result["state"] == "Running"
    asyncio.run(kill(case, result["name"]))

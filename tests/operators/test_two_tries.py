"""Two live tries of one task instance against localkube (real HTTP, real clients): at most one job, and
each try owns it, waits on it or fails with a clear message; no try deletes a job another try created.

Each race is made to happen, not hoped for: one try's request is held at a localkube gate (a ``hold``
fault) while the other try runs, then let through. At the end the task's jobs are counted.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_provider_training import naming, submission
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import (
    KIND_BY_NAME,
    NAMESPACE,
    in_thread,
    jobs,
    make_context,
    manifest,
    resource,
    run_operator,
    wait_for,
)
from tests.operators.test_operator import FOREVER, pytorch

pytestmark = pytest.mark.timeout(60)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
FAILS = {"default": {"duration": 0.05, "exit_code": 1}}
HOLD = "example.com/hold"  # a finalizer nothing removes but the test: a deletion that takes its time


def retry_of(context, try_number):
    return make_context(run_id=context["run_id"], store=context["task_state_store"], try_number=try_number)


def job_name(context):
    identity = naming.TaskIdentity.from_context(context)
    return naming.default_job_name(identity, get_kind("PyTorchJob").replica_types)


def uids(cluster, context):
    identity = naming.TaskIdentity.from_context(context)
    return [j["metadata"]["uid"] for j in jobs(cluster, PYTORCH) if identity.owns(j)]


def hold(cluster, context, method):
    """Hold the next ``method`` request for this task's job at a fresh gate."""
    return cluster.faults.hold(
        f"gate-{uuid.uuid4().hex[:8]}",
        method=method,
        path=f"/{job_name(context)}$" if method == "DELETE" else "/pytorchjobs$",
        resource="pytorchjobs",
    )


def deferred(op, context):
    """Run a deferrable try up to its defer; its trigger (with the uid it waits on)."""
    with pytest.raises(TaskDeferred) as caught:
        op.execute(context)
    return caught.value.trigger


def kill(trigger):
    asyncio.run(trigger.on_kill())


def statuses(cluster, method, name):
    return [r.status for r in cluster.requests if r.method == method and r.path.endswith(f"/{name}")]


def test_earlier_try_finish_delete_arriving_after_the_retry_recreated_spares_the_new_job(cluster):
    first = make_context()
    name = job_name(first)
    gate = hold(cluster, first, "DELETE")
    try1 = pytorch(FAILS, on_finish_action="delete")
    worker, outcome = in_thread(lambda: run_operator(try1, first, "sync"))
    assert gate.wait_reached()  # try 1's job failed; its on_finish delete waits at the gate
    failed_uid = try1._job_ref.uid

    trigger = deferred(pytorch(FOREVER, deferrable=True), retry_of(first, 2))  # replaces the failed job
    assert trigger.job_wait.job.uid != failed_uid
    gate.open()
    worker.join()

    assert isinstance(outcome.get("error"), TrainingJobError)  # try 1 reports its job's failure
    assert uids(cluster, first) == [trigger.job_wait.job.uid]  # try 2's job survived try 1's late delete
    # in order of arrival: try 1's held delete, refused by its uid precondition; try 2's own
    assert statuses(cluster, "DELETE", name) == [409, 200]
    kill(trigger)
    assert uids(cluster, first) == []


def test_two_tries_replacing_the_same_failed_job_end_with_one_job_both_wait_on(cluster, capsys):
    first = make_context()
    with pytest.raises(TrainingJobError):
        run_operator(pytorch(FAILS), first, "sync")
    gate = hold(cluster, first, "DELETE")
    second, third = retry_of(first, 2), retry_of(first, 3)
    worker, outcome = in_thread(lambda: deferred(pytorch(FOREVER, deferrable=True), second))
    assert gate.wait_reached()  # try 2 decided to replace the failed job; its delete is held

    trigger3 = deferred(pytorch(FOREVER, deferrable=True), third)  # deletes it too, and creates the new one
    capsys.readouterr()
    gate.open()
    worker.join()

    trigger2 = outcome["result"]
    # try 2 waits on try 3's job instead of deleting or duplicating it
    assert trigger2.job_wait.job.uid == trigger3.job_wait.job.uid
    assert uids(cluster, first) == [trigger3.job_wait.job.uid]
    logged = capsys.readouterr().out
    assert "was created by another live try (created by try 3) while this try (2) was submitting" in logged
    kill(trigger3)


@pytest.mark.parametrize("action", ["reattach", "recreate"])
def test_concurrent_creates_one_job_and_the_loser_waits_on_it(cluster, action):
    first = make_context()
    second = retry_of(first, 2)
    gate = hold(cluster, first, "POST")
    worker, outcome = in_thread(
        lambda: deferred(pytorch(FOREVER, deferrable=True, action_if_job_exists=action), first)
    )
    assert gate.wait_reached()  # try 1 found nothing and its create is held

    trigger2 = deferred(pytorch(FOREVER, deferrable=True, action_if_job_exists=action), second)
    gate.open()
    worker.join()

    assert "error" not in outcome, outcome.get("error")  # no JobExistsError escapes
    assert outcome["result"].job_wait.job.uid == trigger2.job_wait.job.uid
    assert uids(cluster, first) == [trigger2.job_wait.job.uid]
    assert statuses(cluster, "DELETE", job_name(first)) == []  # even 'recreate' deletes no fresh job
    assert first["task_state_store"].get(submission.STATE_KEY)["uid"] == trigger2.job_wait.job.uid
    kill(trigger2)


def test_on_kill_of_an_earlier_try_leaves_the_job_a_retry_recreated(cluster):
    first = make_context()
    try1 = pytorch(FOREVER, deferrable=True)
    trigger1 = deferred(try1, first)
    trigger2 = deferred(
        pytorch(FOREVER, deferrable=True, action_if_job_exists="recreate"), retry_of(first, 2)
    )
    assert trigger2.job_wait.job.uid != trigger1.job_wait.job.uid

    kill(trigger1)  # the deferred try 1 is killed: its trigger deletes by uid
    try1.on_kill()  # and the operator's own kill path
    assert uids(cluster, first) == [trigger2.job_wait.job.uid]
    assert statuses(cluster, "DELETE", job_name(first))[-2:] == [409, 409]
    kill(trigger2)


def _job_with_finalizer(script):
    job = manifest(PYTORCH, script)
    job["metadata"]["finalizers"] = [HOLD]
    return job


def _release(cluster, name):
    cluster.store.patch(
        resource(cluster, PYTORCH),
        NAMESPACE,
        name,
        b'{"metadata":{"finalizers":null}}',
        "application/merge-patch+json",
    )


def test_a_retry_waits_for_the_earlier_tries_delete_to_finish_then_creates(cluster):
    first = make_context()
    name = job_name(first)
    try1 = PyTorchJobOperator(task_id="train", job=_job_with_finalizer(FAILS), on_finish_action="delete")
    with pytest.raises(TrainingJobError):
        run_operator(try1, first, "sync")
    dying = jobs(cluster, PYTORCH)
    assert [
        j["metadata"].get("deletionTimestamp") is not None for j in dying if j["metadata"]["name"] == name
    ] == [True]  # try 1's delete is under way (the finalizer holds it)

    since = len(cluster.requests)
    worker, outcome = in_thread(lambda: deferred(pytorch(FOREVER, deferrable=True), retry_of(first, 2)))
    wait_for(
        lambda: sum(r.method == "GET" and r.path.endswith(f"/{name}") for r in cluster.requests[since:]) >= 3
    )
    assert worker.is_alive() and uids(cluster, first) == [try1._job_ref.uid]  # waiting, not creating
    _release(cluster, name)
    worker.join()

    assert "error" not in outcome, outcome.get("error")
    assert uids(cluster, first) == [outcome["result"].job_wait.job.uid] != [try1._job_ref.uid]
    kill(outcome["result"])


def test_a_deletion_that_never_ends_fails_the_retry_with_what_holds_it(cluster, monkeypatch):
    monkeypatch.setattr(submission, "DELETION_MARGIN", 0.3)
    first = make_context()
    name = job_name(first)
    try1 = PyTorchJobOperator(task_id="train", job=_job_with_finalizer(FAILS), on_finish_action="delete")
    with pytest.raises(TrainingJobError):
        run_operator(try1, first, "sync")

    with pytest.raises(AirflowException) as caught:
        pytorch(FOREVER, deferrable=True).execute(retry_of(first, 2))

    message = str(caught.value)
    assert f"PyTorchJob {NAMESPACE}/{name} (uid {try1._job_ref.uid}) is still being deleted" in message
    assert f"finalizers: {HOLD}" in message and "deleted by an earlier try's cleanup or a user" in message
    assert uids(cluster, first) == [try1._job_ref.uid]  # nothing created next to it
    _release(cluster, name)
    wait_for(lambda: uids(cluster, first) == [])

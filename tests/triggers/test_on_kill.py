"""TrainingJobTrigger.on_kill() the way the triggerer runs it: inside the cancelled trigger task, under
``wait_for(on_kill_timeout)``, while the triggerer cancels that task again every loop until it has ended."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import suppress

import pytest
from airflow.sdk.api.datamodels._generated import TaskInstance

from tests.operators.harness import job_or_none, wait_for
from tests.triggers.test_trigger import PYTORCH, create, trigger_for

pytestmark = pytest.mark.timeout(30)


async def kill_like_the_triggerer(trigger, *, recancel: int) -> None:
    """on_kill() in a task that is cancelled ``recancel`` more times while it runs (one per loop)."""

    async def trigger_task() -> None:
        await asyncio.wait_for(trigger.on_kill(), timeout=20)

    task = asyncio.create_task(trigger_task())
    for _ in range(recancel):
        await asyncio.sleep(0.05)
        task.cancel("__airflow_user_action__")
    with suppress(asyncio.CancelledError):
        await task


async def test_a_delete_retried_across_repeated_cancellations_still_deletes_the_job(cluster):
    uid = create(cluster, "kill-throttled", {"default": {"duration": None}})["metadata"]["uid"]
    # the first DELETE is throttled: the retry sleeps while the triggerer cancels the trigger again
    cluster.faults.throttle(1, retry_after=1, method="DELETE", resource="pytorchjobs")

    await kill_like_the_triggerer(trigger_for("kill-throttled", uid=uid), recancel=5)

    # the trigger task has ended; the delete goes on in the triggerer's loop (which keeps running)
    while job_or_none(cluster, PYTORCH, "kill-throttled") is not None:
        await asyncio.sleep(0.05)


async def test_on_kill_never_deletes_a_later_job_of_the_same_name_nor_its_children(cluster):
    create(cluster, "kill-reused", {"default": {"duration": None}})
    later = job_or_none(cluster, PYTORCH, "kill-reused")["metadata"]["uid"]
    since = len(cluster.requests)

    await trigger_for("kill-reused", uid="uid-of-an-earlier-try").on_kill()

    job = job_or_none(cluster, PYTORCH, "kill-reused")
    assert job is not None and job["metadata"]["uid"] == later
    assert "deletionTimestamp" not in job["metadata"]
    deletes = [r.path for r in cluster.requests[since:] if r.method == "DELETE"]
    assert len(deletes) == 1 and deletes[0].endswith("/pytorchjobs/kill-reused")  # refused: no child touched


def succeeded(cluster, name: str) -> bool:
    conditions = ((job_or_none(cluster, PYTORCH, name) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)


async def test_a_kill_of_a_finished_task_instance_keeps_its_ended_job(cluster, capsys):
    """A trigger that outlived its task (``airflow dags test`` leaves its row behind) deletes nothing."""
    uid = create(cluster, "kill-ended", {"default": {"duration": 0}})["metadata"]["uid"]
    await asyncio.to_thread(wait_for, lambda: succeeded(cluster, "kill-ended"))
    since = len(cluster.requests)

    deleted = await trigger_for("kill-ended", uid=uid)._kill_job("success")

    assert not deleted
    assert not [r for r in cluster.requests[since:] if r.method == "DELETE"]
    assert job_or_none(cluster, PYTORCH, "kill-ended")["metadata"]["uid"] == uid
    out = capsys.readouterr().out
    assert "Deleting nothing: PyTorchJob default/kill-ended already ended (Succeeded)" in out
    assert "decided by this trigger" in out


async def test_a_kill_of_a_finished_task_instance_deletes_its_running_job(cluster, capsys):
    """Marked failed while no triggerer ran: the job still runs, the user ended the try."""
    uid = create(cluster, "kill-marked", {"default": {"duration": None}})["metadata"]["uid"]

    assert await trigger_for("kill-marked", uid=uid)._kill_job("failed")

    await asyncio.to_thread(wait_for, lambda: job_or_none(cluster, PYTORCH, "kill-marked") is None)
    out = capsys.readouterr().out
    said = "Deleting PyTorchJob default/kill-marked (on_kill_action='delete'): the task instance is failed"
    assert said in out


async def test_a_kill_seen_by_another_try_deletes_nothing(cluster, capsys):
    """The trigger of try 1 killed once the task instance is at try 2: that try's job is not touched."""
    uid = create(cluster, "kill-moved-on", {"default": {"duration": None}})["metadata"]["uid"]
    trigger = trigger_for("kill-moved-on", uid=uid, try_number=1)
    trigger.task_instance = TaskInstance(
        id=uuid.uuid4(), task_id="t", dag_id="d", run_id="r", try_number=2, dag_version_id=uuid.uuid4()
    )
    since = len(cluster.requests)

    assert not await trigger._kill_job("running")

    assert not [r for r in cluster.requests[since:] if r.method == "DELETE"]
    assert job_or_none(cluster, PYTORCH, "kill-moved-on")["metadata"]["uid"] == uid
    assert "this trigger waited for try 1, and the task instance is at try 2 now" in capsys.readouterr().out


def running(cluster, name: str) -> bool:
    conditions = ((job_or_none(cluster, PYTORCH, name) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Running" and c["status"] == "True" for c in conditions)


async def test_a_kill_of_a_succeeded_wait_until_running_keeps_its_running_job(cluster, capsys):
    """``wait_until="Running"`` under ``airflow dags test``: the task succeeded once the job ran, and the
    trigger it left behind must not stop the job the task meant to run on."""
    uid = create(cluster, "kill-ran", {"default": {"duration": None}})["metadata"]["uid"]
    await asyncio.to_thread(wait_for, lambda: running(cluster, "kill-ran"))
    since = len(cluster.requests)

    assert not await trigger_for("kill-ran", uid=uid, target_state="Running")._kill_job("success")

    assert not [r for r in cluster.requests[since:] if r.method == "DELETE"]
    assert job_or_none(cluster, PYTORCH, "kill-ran")["metadata"]["uid"] == uid
    said = "Deleting nothing: PyTorchJob default/kill-ran is Running, the state this trigger waited for"
    assert said in capsys.readouterr().out

    # Marked failed while it ran, the same job is the user's to stop.
    assert await trigger_for("kill-ran", uid=uid, target_state="Running")._kill_job("failed")
    await asyncio.to_thread(wait_for, lambda: job_or_none(cluster, PYTORCH, "kill-ran") is None)

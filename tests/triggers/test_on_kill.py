"""TrainingJobTrigger.on_kill() the way the triggerer runs it: inside the cancelled trigger task, under
``wait_for(on_kill_timeout)``, while the triggerer cancels that task again every loop until it has ended."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest

from tests.operators.harness import job_or_none
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

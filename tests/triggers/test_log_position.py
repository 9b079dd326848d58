"""How often a trigger's log position is written, and what a trigger after a hard crash reads back.

The writes go through the real Task SDK call (``XCom.aset`` -> ``SUPERVISOR_COMMS.asend(SetXCom)``) into a
stand-in for the triggerer's comms that records them (a real triggerer's write interval cannot be observed
without a deployment; tests/e2e/test_triggerer_restart.py runs one). ``keep``'s ticks are driven one at a
time through a gate, so no step depends on timing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import GetXCom, OKResponse, SetXCom, XComResult

from airflow_provider_training.triggers import log_position
from airflow_provider_training.triggers.log_position import (
    NOT_YET,
    SAVE_SECONDS,
    SETTLE_SECONDS,
    XCOM_KEY,
    LogPosition,
)

TI = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)


class Comms:
    """The triggerer's comms as the Task SDK sees them: an XCom store that counts the writes."""

    def __init__(self) -> None:
        self.writes: list[SetXCom] = []
        self.stored: dict[str, Any] = {}

    async def asend(self, msg: Any) -> Any:
        if isinstance(msg, SetXCom):
            self.writes.append(msg)
            self.stored[msg.key] = msg.value
            return OKResponse(ok=True)
        assert isinstance(msg, GetXCom)
        return XComResult(key=msg.key, value=self.stored.get(msg.key))

    def saved(self, index: int = -1) -> dict[str, Any]:
        value = self.writes[index].value
        return json.loads(value) if isinstance(value, str) else value


class Ticks:
    """``keep``'s sleeps, each ended by :meth:`tick`."""

    def __init__(self) -> None:
        self.asleep = asyncio.Event()
        self.wake: asyncio.Future[None] | None = None

    async def sleep(self, delay: float) -> None:
        assert delay == SETTLE_SECONDS
        self.wake = asyncio.get_running_loop().create_future()
        self.asleep.set()
        await self.wake

    async def tick(self) -> None:
        """One sleep of ``keep`` ended; returns once it sleeps again (its write, if any, made)."""
        await self.asleep.wait()
        self.asleep.clear()
        assert self.wake is not None
        self.wake.set_result(None)
        await self.asleep.wait()


@pytest.fixture
def comms(monkeypatch: pytest.MonkeyPatch) -> Comms:
    stand_in = Comms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", stand_in, raising=False)
    return stand_in


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> Ticks:
    gate = Ticks()
    monkeypatch.setattr(log_position.asyncio, "sleep", gate.sleep)
    return gate


async def test_a_streaming_trigger_writes_when_a_pod_starts_and_then_every_save_interval(comms, ticks):
    """Issue 27: the position was written about once a second per streaming trigger. Now: once a pod's lines
    start (a new pod in the cursors), then once every SAVE_SECONDS (30 s), whatever the lines do."""
    lines = {"pod-a": [0, 1]}
    keeping = asyncio.create_task(
        LogPosition(TI, logging.getLogger()).keep(lambda: json.loads(json.dumps(lines)))
    )
    await ticks.asleep.wait()  # keep has its first cursors
    written_at: list[int] = []
    for tick in range(1, 91):  # 90 s of a line every second; a second pod from the 45th
        lines["pod-a"] = [tick, 1]
        if tick == 45:
            lines["pod-b"] = [tick, 1]
        before = len(comms.writes)
        await ticks.tick()
        if len(comms.writes) > before:
            written_at.append(tick)
            assert comms.saved()["cursors"]["pod-a"] == [tick - 1, 1]  # a tick behind: those lines are out
    keeping.cancel()

    assert written_at == [1, 31, 46, 76]  # the first pod, 30 s later, pod-b, 30 s later
    assert SAVE_SECONDS / SETTLE_SECONDS == 30


async def test_after_a_hard_crash_the_lines_since_the_last_write_are_marked(comms, ticks):
    """A triggerer killed between two writes saves nothing at the end: the next trigger resumes from the last
    write, and every line the killed one may have emitted since (up to the next write, SAVE_SECONDS later)
    is within the mark window."""
    lines = {"pod-a": [5, 1]}
    keeping = asyncio.create_task(LogPosition(TI, logging.getLogger()).keep(lambda: dict(lines)))
    await ticks.tick()
    keeping.cancel()  # killed: no final write
    saved_at = comms.saved()["saved_at"]

    resume, mark_until = await LogPosition(TI, logging.getLogger()).load()

    assert resume == {"pod-a": [5, 1]}
    assert mark_until is not None and mark_until >= saved_at + int((SAVE_SECONDS + SETTLE_SECONDS) * 1e9)


async def test_a_first_start_reads_the_not_yet_position_without_a_warning_or_an_error(comms, caplog):
    """What the deferral stored (NOT_YET) is the trigger's first read: streaming from the start, no log
    line above INFO (an absent XCom would be a 404, logged as ERROR by the triggerer's API client)."""
    comms.stored[XCOM_KEY] = json.dumps(NOT_YET)

    with caplog.at_level(logging.INFO):
        assert await LogPosition(TI, logging.getLogger("trigger")).load() == (None, None)

    assert [r for r in caplog.records if r.levelno > logging.INFO] == []


async def test_a_trigger_killed_before_its_first_periodic_write_still_marks_what_it_repeats(comms):
    """Seen in the SIGKILL e2e test: a trigger that catches up on a job's first seconds, killed within a
    second of starting to stream. Its start was saved (by load, before it emitted a line): the next trigger
    streams from the start and marks the lines the killed one may have emitted."""
    assert await LogPosition(TI, logging.getLogger()).load() == (None, None)  # the first start; then killed

    resume, mark_until = await LogPosition(TI, logging.getLogger()).load()

    assert resume == {}
    assert mark_until is not None and mark_until >= comms.saved(0)["saved_at"]

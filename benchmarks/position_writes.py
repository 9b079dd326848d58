"""Metadata-database writes of the saved log position: N streaming triggers, the old interval and the new.

Each of ``--jobs`` (1,000) ``LogPosition.keep`` loops saves the cursors of a trigger whose replica writes a
line every second (and a second replica from ``--ticks`` / 2 on). Their writes go through the real Task SDK
call (``XCom.aset`` -> ``SUPERVISOR_COMMS.asend(SetXCom)``), which a triggerer's supervisor turns into one
execution-API request and one database write each; here a stand-in for the comms counts them. The loops'
one-second sleeps are ended together, one simulated second at a time, so the run takes seconds, not
minutes. Printed: the writes per second at steady state (the second half of the run) for the old interval
(1 s, what the position was saved at before issue 27: this code then writes every second while lines
flow, as the old did) and the new one (``SAVE_SECONDS``), side by side.

    python benchmarks/position_writes.py [--jobs 1000] [--ticks 120]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import OKResponse, SetXCom

from airflow_provider_training.triggers import log_position

OLD_SAVE_SECONDS = 1.0


class CountingComms:
    """The triggerer's comms as the Task SDK sees them, counting the XCom writes."""

    def __init__(self) -> None:
        self.writes = 0

    async def asend(self, msg: Any) -> Any:
        assert isinstance(msg, SetXCom)
        self.writes += 1
        return OKResponse(ok=True)


class Seconds:
    """Every loop's ``asyncio.sleep(SETTLE_SECONDS)``, ended together by :meth:`tick`."""

    def __init__(self, sleepers: int) -> None:
        self.sleepers = sleepers
        self.asleep = 0
        self.all_asleep = asyncio.Event()
        self.next: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def sleep(self, delay: float) -> None:
        wake = self.next
        self.asleep += 1
        if self.asleep == self.sleepers:
            self.all_asleep.set()
        await wake

    async def tick(self) -> None:
        await self.all_asleep.wait()
        self.asleep = 0
        self.all_asleep.clear()
        wake, self.next = self.next, asyncio.get_running_loop().create_future()
        wake.set_result(None)
        await self.all_asleep.wait()


async def writes_per_second(jobs: int, ticks: int, save_seconds: float) -> tuple[float, int]:
    """(writes per second in the second half of the run, writes in all) with ``SAVE_SECONDS`` as given."""
    log_position.SAVE_SECONDS = save_seconds
    comms = CountingComms()
    task_runner.SUPERVISOR_COMMS = comms  # type: ignore[attr-defined]
    seconds = Seconds(jobs)
    log_position.asyncio.sleep = seconds.sleep  # type: ignore[assignment]
    pods: list[dict[str, list[int]]] = [{"master": [0, 1]} for _ in range(jobs)]
    keepers = []
    for index, cursors in enumerate(pods):
        ti = SimpleNamespace(dag_id="bench", run_id="r", task_id=f"t{index}", map_index=-1)
        position = log_position.LogPosition(ti, logging.getLogger("bench"))
        keepers.append(
            asyncio.create_task(position.keep(lambda c=cursors: {k: list(v) for k, v in c.items()}))
        )
    half = 0
    for tick in range(1, ticks + 1):
        for cursors in pods:
            cursors["master"] = [tick, 1]
            if tick == ticks // 2:
                cursors["worker"] = [tick, 1]
        if tick == ticks // 2 + 1:
            half = comms.writes
        await seconds.tick()
    for keeper in keepers:
        keeper.cancel()
    await asyncio.gather(*keepers, return_exceptions=True)
    steady = comms.writes - half
    return steady / (ticks - ticks // 2) / log_position.SETTLE_SECONDS, comms.writes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=120, help="simulated seconds")
    args = parser.parse_args()
    sleep, new = asyncio.sleep, log_position.SAVE_SECONDS
    try:
        rows = [
            (
                f"before ({OLD_SAVE_SECONDS:g} s)",
                *await writes_per_second(args.jobs, args.ticks, OLD_SAVE_SECONDS),
            ),
            (f"now ({new:g} s)", *await writes_per_second(args.jobs, args.ticks, new)),
        ]
    finally:
        asyncio.sleep, log_position.SAVE_SECONDS = sleep, new  # type: ignore[assignment]
    print(
        f"{args.jobs} streaming triggers, {args.ticks} s of a line a second each "
        "(a second replica from the middle)"
    )
    print(f"{'save interval':<20} {'writes/s (steady)':>18} {'writes in all':>14}")
    for name, rate, total in rows:
        print(f"{name:<20} {rate:>18.1f} {total:>14}")


if __name__ == "__main__":
    asyncio.run(main())

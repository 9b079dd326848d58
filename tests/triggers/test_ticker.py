"""The waiters' shared ticker: one loop timer for every waiter's time-based checks."""

from __future__ import annotations

import asyncio

from airflow_provider_training.waiting import _Ticker


async def test_one_timer_serves_every_entry_in_time_order_and_cancelled_ones_never_run():
    loop = asyncio.get_running_loop()
    ticker = _Ticker.of(loop)
    assert _Ticker.of(loop) is ticker
    fired: list[str] = []
    done = asyncio.Event()
    now = loop.time()
    ticker.at(now + 0.03, lambda: (fired.append("late"), done.set()))
    first = ticker.at(now + 0.01, lambda: fired.append("first"))
    cancelled = ticker.at(now + 0.02, lambda: fired.append("cancelled"))
    cancelled.cancel()
    assert ticker.timer is not None and ticker.timer.when() == first.when  # one timer, for the earliest
    await done.wait()
    assert fired == ["first", "late"]
    assert ticker.heap == [] and ticker.timer is None


async def test_each_loop_has_its_own_ticker():
    here = _Ticker.of(asyncio.get_running_loop())

    def elsewhere() -> _Ticker:
        async def get() -> _Ticker:
            return _Ticker.of(asyncio.get_running_loop())

        return asyncio.run(get())

    assert await asyncio.to_thread(elsewhere) is not here

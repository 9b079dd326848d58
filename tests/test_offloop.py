"""``import_off_loop``: modules imported in a thread, once, with the cycle collector paused meanwhile and what
lived then frozen (so later full collections do not walk the imported modules' objects)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_training import offloop
from airflow_provider_training.offloop import import_off_loop, once_in_thread

PROBE = """import threading
IMPORTED_IN = threading.current_thread().name
TABLE = [[i] for i in range(10_000)]
"""


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh module to import; afterwards the collector runs as before and nothing stays frozen."""
    name = f"offloop_probe_{request.node.name.replace('[', '_').replace(']', '')}"
    (tmp_path / f"{name}.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    enabled = gc.isenabled()
    yield name
    gc.unfreeze()
    if enabled:
        gc.enable()
    sys.modules.pop(name, None)


@pytest.mark.parametrize("collector", ["enabled", "disabled"])
def test_imports_in_a_thread_and_gives_the_collector_back_as_it_was(probe, collector):
    if collector == "disabled":
        gc.disable()

    asyncio.run(import_off_loop(probe))

    assert gc.isenabled() is (collector == "enabled")
    assert threading.main_thread().name != sys.modules[probe].IMPORTED_IN


def test_what_lived_after_the_import_is_frozen(probe):
    before = gc.get_freeze_count()

    asyncio.run(import_off_loop(probe))

    assert gc.get_freeze_count() >= before + 10_000  # at least the module's 10,000 lists


def test_callers_waiting_for_one_import_leave_nothing_on_the_thread_s_future():
    """Hundreds of triggers starting during an import each awaited their own wrapped future, and the
    thread's future (kept for the process) kept a callback for each of them for good."""
    gate = threading.Event()
    key = ("test", "gated")

    async def callers() -> list[int]:
        waiting = [asyncio.create_task(once_in_thread(key, lambda: gate.wait(10) and 7)) for _ in range(50)]
        await asyncio.sleep(0)  # every caller is waiting now
        while not all(task.done() for task in waiting):
            gate.set()
            await asyncio.sleep(0.01)
        return [task.result() for task in waiting]

    try:
        assert asyncio.run(callers()) == [7] * 50
        kept = offloop._results[key]._done_callbacks  # type: ignore[attr-defined]
        assert len(kept) <= 1  # one mirror for the loop, not one per caller
    finally:
        offloop._results.pop(key, None)

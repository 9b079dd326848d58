"""``import_off_loop`` and ``once_in_thread``: work done in a worker thread, once per process and key, with no
process-wide side effect (the cycle collector is left as it was)."""

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
    """A fresh module to import."""
    name = f"offloop_probe_{request.node.name.replace('[', '_').replace(']', '')}"
    (tmp_path / f"{name}.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_imports_in_a_thread_and_leaves_the_collector_alone(probe):
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()

    asyncio.run(import_off_loop(probe))

    assert threading.main_thread().name != sys.modules[probe].IMPORTED_IN
    assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, frozen)


def test_callers_waiting_together_share_one_computation_and_a_failure_is_tried_again():
    gate = threading.Event()
    runs: list[int] = []
    key = ("test", "gated")

    def work() -> int:
        runs.append(1)
        gate.wait(10)
        return 7

    async def callers() -> list[int]:
        waiting = [asyncio.create_task(once_in_thread(key, work)) for _ in range(50)]
        await asyncio.sleep(0)  # every caller is waiting now
        gate.set()
        return list(await asyncio.gather(*waiting))

    def fails() -> int:
        raise ValueError("no")

    try:
        assert asyncio.run(callers()) == [7] * 50 and len(runs) == 1
        assert asyncio.run(once_in_thread(key, work)) == 7 and len(runs) == 1  # kept
        with pytest.raises(ValueError):
            asyncio.run(once_in_thread(("test", "fails"), fails))
        assert asyncio.run(once_in_thread(("test", "fails"), lambda: 3)) == 3
    finally:
        offloop._results.pop(key, None)
        offloop._results.pop(("test", "fails"), None)

"""Once-per-process work that must not run on the triggerer's event loop, done in a worker thread.

Every trigger shares the triggerer's one event loop, so a step that computes for long stalls all of them (and
past a while Airflow declares the loop deadlocked). Importing the Kubernetes client (seconds) or loading a CA
bundle into a TLS context (tens of milliseconds, for every one of hundreds of triggers) is such work:
:func:`once_in_thread` does it in a thread, once per process and key, every caller awaiting the same result.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_results: dict[Hashable, Future[Any]] = {}


async def once_in_thread(key: Hashable, work: Callable[[], T]) -> T:
    """``work()``'s result, computed in a worker thread the first time ``key`` is asked for, then kept.

    Concurrent callers (many triggers starting together) wait for the one computation under way; the
    awaiting loop keeps running meanwhile. A failure is raised to the callers waiting for it, and the next
    call tries again.
    """
    with _lock:
        future = _results.get(key)
        if future is None or (future.done() and future.exception() is not None):
            future = _results[key] = Future()
            future.set_running_or_notify_cancel()  # a caller's cancellation must not cancel the work
            threading.Thread(target=_run, args=(work, future), name=f"once: {key}"[:60], daemon=True).start()
    result: T = future.result() if future.done() else await asyncio.wrap_future(future)
    return result


def _run(work: Callable[[], Any], future: Future[Any]) -> None:
    try:
        result = work()
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


async def import_off_loop(*modules: str) -> None:
    """Import ``modules`` in a worker thread, once per process; later calls return at once."""

    def load() -> None:
        for name in modules:
            importlib.import_module(name)

    await once_in_thread(("import", modules), load)

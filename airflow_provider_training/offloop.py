"""Once-per-process work that must not run on the triggerer's event loop, done in a worker thread.

Every trigger shares the triggerer's one event loop, so a step that computes for long stalls all of them (and
past a while Airflow declares the loop deadlocked). Importing the Kubernetes client (seconds) or loading a CA
bundle into a TLS context (tens of milliseconds, for every one of hundreds of triggers) is such work:
:func:`once_in_thread` does it in a thread, once per process and key, every caller awaiting the same result.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import threading
import weakref
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
    if not future.done():
        await asyncio.shield(_on_loop(future))
    result: T = future.result()
    return result


_mirrors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Future[Any], asyncio.Future[Any]]] = (
    weakref.WeakKeyDictionary()
)


def _on_loop(future: Future[Any]) -> asyncio.Future[Any]:
    """One asyncio future per loop that mirrors ``future``, for its callers to share. A thread's future keeps
    the callbacks added to it for as long as it lives (``_results`` keeps it for the process): one wrapped
    future per caller left some 600 B behind for every trigger that started during an import."""
    loop = asyncio.get_running_loop()
    mirrors = _mirrors.setdefault(loop, {})
    mirror = mirrors.get(future)
    if mirror is None:
        mirror = mirrors[future] = asyncio.wrap_future(future, loop=loop)
        mirror.add_done_callback(lambda _: mirrors.pop(future, None))
    return mirror


def _run(work: Callable[[], Any], future: Future[Any]) -> None:
    try:
        result = work()
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


async def import_off_loop(*modules: str) -> None:
    """Import ``modules`` in a worker thread, once per process; later calls return at once.

    The Kubernetes client alone adds some 200,000 objects that live as long as the process. A full garbage
    collection walks every tracked object while holding the GIL, so right after the import one took 120 to
    160 ms, the longest loop stall left (``benchmarks/loop_lag.py``). So the automatic collector is paused
    while the modules load, and what is alive then is moved to the permanent generation (``gc.freeze()``),
    which later collections skip: the modules' objects are never garbage. What is frozen is never collected
    by the cycle collector (only by reference counting): a bounded, one-off cost of what lived at that moment.
    """

    def load() -> None:
        paused = gc.isenabled()
        gc.disable()
        try:
            for name in modules:
                importlib.import_module(name)
        finally:
            gc.freeze()
            if paused:
                gc.enable()

    await once_in_thread(("import", modules), load)

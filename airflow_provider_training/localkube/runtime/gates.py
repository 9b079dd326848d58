"""Gates: named points a scripted container waits at until a test opens them.

A test that must see an intermediate state (a job Running before it Succeeds, an operator deferred before its
job ends) scripts the deciding container with ``"gate": "<name>"``: after writing its logs the container does
not exit until :func:`open_gate` is called with that name, from any thread. Nothing depends on how fast the
machine is.
"""

from __future__ import annotations

import asyncio
import threading

_lock = threading.Lock()
_opened: set[str] = set()
_waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


def open_gate(name: str) -> None:
    """Open gate ``name``: containers waiting at it go on, and later ones pass it at once."""
    with _lock:
        _opened.add(name)
        waiters = _waiters.pop(name, [])
    for loop, event in waiters:
        if not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


def close_gate(name: str) -> None:
    """Close gate ``name`` again (gates are process-wide: a test that reuses a name closes it first)."""
    with _lock:
        _opened.discard(name)


def is_open(name: str) -> bool:
    with _lock:
        return name in _opened


async def wait_gate(name: str) -> None:
    """Return once gate ``name`` is open."""
    event = asyncio.Event()
    with _lock:
        if name in _opened:
            return
        _waiters.setdefault(name, []).append((asyncio.get_running_loop(), event))
    await event.wait()

"""Gates: named points where localkube waits until a test opens them, so tests order events instead of
betting on the machine's speed.

Two things wait at gates:

- requests held by a ``hold`` fault (``Faults.hold`` in :mod:`localkube.faults`),
  e.g. one client's DELETE, while the test lets another client go first;
- scripted containers whose step says ``"gate": "<name>"``: after writing their logs they do not exit until
  the gate opens (a job stays Running until the test has seen it Running).

Gates are process-wide by name and thread-safe: open one from the test's thread (:func:`open_gate`), from
any event loop, or over HTTP (``POST /localkube/gates/<name>``). An open gate stays open (later arrivals pass
at once) until :func:`close_gate`.
"""

from __future__ import annotations

import asyncio
import threading

_lock = threading.Lock()
_gates: dict[str, Gate] = {}


class Gate:
    """One gate: who arrived (``arrived``, ``wait_reached``), and whether it is open."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.arrived: list[str] = []  # what waited here: "GET /api/v1/..." for requests, a pod for containers
        self._reached = threading.Event()
        self._opened = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    def wait_reached(self, timeout: float = 60.0) -> bool:
        """Block until something waits at the gate (a synchronisation helper: True once something does)."""
        return self._reached.wait(timeout)

    def open(self) -> None:
        with _lock:
            self._opened.set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        with _lock:
            self._opened.clear()
            self._reached.clear()

    async def wait(self, who: str) -> None:
        """Wait (on the running loop) until the gate is open; ``who`` is recorded in ``arrived``."""
        event = asyncio.Event()
        with _lock:
            self.arrived.append(who)
            self._reached.set()
            if self._opened.is_set():
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()


def gate(name: str) -> Gate:
    """The gate named ``name`` (created closed on first use)."""
    with _lock:
        found = _gates.get(name)
        if found is None:
            found = _gates[name] = Gate(name)
        return found


def open_gate(name: str) -> None:
    """Open gate ``name``: what waits there goes on, and later arrivals pass at once."""
    gate(name).open()


def close_gate(name: str) -> None:
    """Close gate ``name`` again (a test that reuses a name closes it first)."""
    gate(name).close()

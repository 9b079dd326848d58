"""An event-driven reconcile loop over the store: the work queue a controller-runtime manager provides.

Every store change is mapped to the key of the object to reconcile (a job for its own changes and for
changes of the pods/services it controls). Keys are de-duplicated while queued; reconciles run one at a
time on the cluster's loop. A reconcile may ask to run again after a delay (deadlines, TTLs), which is how
time-based checks happen without polling. Reconciles must be idempotent: their own writes come back as events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from localkube.store import ApiError, WatchEvent

if TYPE_CHECKING:
    from localkube.api import ClusterApi

log = logging.getLogger(__name__)

ERROR_BACKOFF = 0.05
MAX_ERROR_BACKOFF = 2.0


class ReconcileLoop:
    """Base class: subclasses implement `keys_for_event`, `initial_keys` and `reconcile`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._errors: dict[Hashable, int] = {}
        self.store: ClusterApi

    # -- to implement --------------------------------------------------------------------------------------
    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        raise NotImplementedError

    def initial_keys(self) -> list[Hashable]:
        raise NotImplementedError

    def reconcile(self, key: Any) -> float | None:
        """Bring `key` towards its desired state; return seconds until it must be looked at again, if any."""
        raise NotImplementedError

    # -- machinery -----------------------------------------------------------------------------------------
    async def run(self, cluster: Any) -> None:
        self.store = cluster.store
        subscription = self.store.subscribe()
        feeder = asyncio.create_task(self._feed(subscription))
        try:
            for key in self.initial_keys():
                self.enqueue(key)
            while True:
                key = await self._queue.get()
                self._queued.discard(key)
                self._reconcile_safely(key)
                await asyncio.sleep(0)  # let the runtime and the server interleave with a busy queue
        finally:
            subscription.close()
            feeder.cancel()
            for timer in self._timers.values():
                timer.cancel()

    async def _feed(self, subscription: Any) -> None:
        async for event in subscription:
            for key in self.keys_for_event(event):
                self.enqueue(key)

    def enqueue(self, key: Hashable) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        """Reconcile `key` in `delay` seconds (the earliest request wins)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, 0.0)
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.enqueue(key)

    def _reconcile_safely(self, key: Hashable) -> None:
        try:
            delay = self.reconcile(key)
        except ApiError as exc:  # a conflict or a vanished object: look again shortly
            log.debug("reconcile %s: %s %s", key, exc.code, exc.message)
            delay = self._error_delay(key)
        except Exception:
            log.exception("reconcile %s failed", key)
            delay = self._error_delay(key)
        else:
            self._errors.pop(key, None)
        if delay is not None:
            self.enqueue_after(key, delay)

    def _error_delay(self, key: Hashable) -> float:
        failures = self._errors[key] = self._errors.get(key, 0) + 1
        return min(ERROR_BACKOFF * 2 ** (failures - 1), MAX_ERROR_BACKOFF)

"""Watch events and subscriptions: how store changes reach asyncio consumers, in order, from any thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localkube.copying import clone
from localkube.resources import ResourceType


@dataclass(frozen=True)
class WatchEvent:
    """One change. `old` is the previous state of a MODIFIED object (selector transitions need it)."""

    type: str
    rt: ResourceType
    object: dict
    old: dict | None = None

    @property
    def resource_version(self) -> int:
        return int(self.object["metadata"]["resourceVersion"])


_CLOSED = object()


class Subscription:
    """Async iterator of WatchEvents (deep copies) for changes after it was opened. `close()` ends it."""

    def __init__(
        self,
        unsubscribe: Callable[[Subscription], None],
        loop: asyncio.AbstractEventLoop,
        rt: ResourceType | None,
        namespace: str | None,
        start_rv: int,
    ) -> None:
        self._unsubscribe, self._loop, self._rt, self._namespace = unsubscribe, loop, rt, namespace
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.last_rv = start_rv  # every change seen so far, matching or not: safe for bookmarks
        self.closed = False

    def _push(self, event: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # loop closed
            self.closed = True

    def _matches(self, event: WatchEvent) -> bool:
        if self._rt is not None and event.rt != self._rt:
            return False
        return self._namespace is None or event.object["metadata"].get("namespace") == self._namespace

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            event = await self._queue.get()
            if event is _CLOSED:
                raise StopAsyncIteration
            self.last_rv = max(self.last_rv, event.resource_version)
            if self._matches(event):
                return WatchEvent(event.type, event.rt, clone(event.object), clone(event.old))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._unsubscribe(self)
            self._push(_CLOSED)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

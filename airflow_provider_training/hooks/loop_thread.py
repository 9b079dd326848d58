"""A private event loop in a daemon thread, so sync callers can use the async hook."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on its own event loop, in its own daemon thread, and waits for their results."""

    def __init__(self, name: str = "training-hook-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def closed(self) -> bool:
        return self._loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop and return its result (or raise its error) here."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted here (e.g. on_kill): stop the work on the loop too
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """Consume an async iterator from sync code, one item per round trip to the loop."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await anext(items)
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.run(step())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            close = getattr(items, "aclose", None)
            if close is not None and not self.closed:
                self.run(close())

    def close(self) -> None:
        """Stop the loop and its thread (pending work is cancelled)."""
        if self.closed:
            return

        async def cancel_pending() -> None:
            current = asyncio.current_task()
            tasks = [task for task in asyncio.all_tasks() if task is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_pending())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

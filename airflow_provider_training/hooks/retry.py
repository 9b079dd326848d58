"""Retrying transient Kubernetes API failures: 429 (honouring Retry-After), 5xx and dropped connections."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from airflow_provider_training.hooks.errors import KubeApiError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Whether a call that failed with ``exc`` may succeed when repeated."""
    if isinstance(exc, KubeApiError):
        return exc.status in RETRYABLE_STATUS
    return isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter; a server's Retry-After wins (capped)."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    # Called before each sleep with (attempt number starting at 1, delay, error); for logs and tests.
    on_retry: Callable[[int, float, BaseException], None] | None = None

    def delay(self, attempt: int, exc: BaseException | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if isinstance(exc, KubeApiError) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_after)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    async def sleep(self, attempt: int, exc: BaseException) -> None:
        wait = self.delay(attempt, exc)
        if self.on_retry is not None:
            self.on_retry(attempt, wait, exc)
        log.info("Kubernetes API call failed (%s); retry %d in %.2fs", _describe(exc), attempt, wait)
        await asyncio.sleep(wait)

    async def call(self, fn: Callable[[int], Awaitable[T]]) -> T:
        """Run ``fn(attempt)`` until it succeeds, a non-transient error occurs or the attempts are used up."""
        attempt = 1
        while True:
            try:
                return await fn(attempt)
            except Exception as exc:
                if attempt >= self.attempts or not is_transient(exc):
                    raise
                await self.sleep(attempt, exc)
                attempt += 1


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__

"""Retrying transient Kubernetes API failures: 429 (honouring Retry-After), 5xx and lost connections, as our
own error types tell them (:mod:`.errors`: the transport wraps the HTTP client's errors).

A :class:`RetryPolicy` gives up after ``attempts``. Inside :func:`retry_until` (a wait for a job) every call
keeps retrying transient failures instead, until the wait's deadline or, without one, for ``patience``
seconds: a busy API server must not end a wait whose job is fine. The scope is a context variable, so it
covers the tasks the wait starts (watch confirmations, log followers) and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
WAIT_PATIENCE = 900.0
"""How long a read of a wait without a deadline retries transient failures (seconds)."""
MIN_RETRY_AFTER = 0.05  # a Retry-After of 0 must not become a busy loop


def is_transient(exc: BaseException) -> bool:
    """Whether a call that failed with ``exc`` may succeed when repeated."""
    if isinstance(exc, KubeApiError):
        return exc.status in RETRYABLE_STATUS
    return isinstance(exc, KubeConnectionError) and exc.transient


@dataclass(frozen=True, slots=True)
class RetryScope:
    """Retry transient failures until ``deadline`` (UTC), or for ``patience`` seconds without one."""

    deadline: datetime | None = None
    patience: float = WAIT_PATIENCE

    def remaining(self, started: float, now: float) -> float:
        """Seconds left for retries of a call that started at loop time ``started``."""
        if self.deadline is not None:
            return (self.deadline - datetime.now(UTC)).total_seconds()
        return self.patience - (now - started)


_scope: contextvars.ContextVar[RetryScope | None] = contextvars.ContextVar("retry_scope", default=None)


@contextlib.contextmanager
def retry_until(deadline: datetime | None, patience: float = WAIT_PATIENCE) -> Iterator[RetryScope]:
    """Within this block, and in tasks started from it, API calls retry transient failures until
    ``deadline`` (or for ``patience`` seconds) instead of for a number of attempts."""
    scope = RetryScope(deadline, patience)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


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
            return max(MIN_RETRY_AFTER, min(exc.retry_after, self.max_retry_after))
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    async def sleep(self, attempt: int, exc: BaseException, wait: float | None = None) -> None:
        wait = self.delay(attempt, exc) if wait is None else wait
        if self.on_retry is not None:
            self.on_retry(attempt, wait, exc)
        log.info("Kubernetes API call failed (%s); retry %d in %.2fs", _describe(exc), attempt, wait)
        await asyncio.sleep(wait)

    async def call(self, fn: Callable[[int], Awaitable[T]]) -> T:
        """Run ``fn(attempt)`` until it succeeds, a non-transient error occurs or the retries are used up:
        ``attempts``, or inside :func:`retry_until` its deadline (one last attempt at it) or patience."""
        scope = _scope.get()
        loop = asyncio.get_running_loop()
        started = loop.time()
        attempt = 1
        while True:
            try:
                return await fn(attempt)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                wait = self.delay(attempt, exc)
                if scope is None:
                    if attempt >= self.attempts:
                        raise
                else:
                    left = scope.remaining(started, loop.time())
                    if left <= 0:
                        raise
                    wait = min(wait, left)
                await self.sleep(attempt, exc, wait)
                attempt += 1


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__

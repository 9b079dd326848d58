"""One replica pod's log, followed: what the follow knows of its pod, and the follow itself.

A follow streams its container's log while the container runs and reads it when it stopped, until the pod
ends or goes. A stream that broke, or a container that restarted, is read again from the pod's cursor
(``log_cursor``), so nothing is lost or emitted twice; the previous instance of a restarted container is read
before the new one. Which pods are followed, and when the follows stop, is ``logs.ReplicaLogStreamer``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.log_cursor import LogCursor, Session

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
# A backlog (thousands of lines at once) is parsed and emitted in steps of at most this long, and a whole log
# read split in pieces of about this many characters (each emitted as one): the triggerer's other triggers run
# in between.
STEP_SECONDS = 0.02
PIECE_CHARS = 1 << 16


class LogStream(Protocol):
    """An open log follow, as the hook's ``open_log`` gives it."""

    async def lines(self) -> list[bytes] | None:
        """The next complete lines as they come; ``None`` at the end."""

    def close(self) -> None: ...


class FollowedPod:
    """What a follow knows about its pod (slots: a triggerer follows thousands).

    Of the pod object only what the follow reads is kept (a pod as the hub hands it is some 3 KiB of dicts):
    its uid, phase, and its container's state and restarts.
    """

    __slots__ = (
        "changed",
        "container",
        "cursor",
        "deleted",
        "done",
        "has_run",
        "name",
        "phase",
        "prefix",
        "replica_type",
        "restarts",
        "restarts_read",
        "running",
        "said",
        "stream",
        "tail",
        "task",
        "uid",
        "unread",
        "waiter",
    )

    def __init__(
        self,
        name: str,
        replica_type: str,
        label: str,
        container: str,
        pod: dict[str, Any],
        tail: int,
        cursor: Sequence[int] | None = None,
    ) -> None:
        self.name = name
        self.replica_type = replica_type
        self.prefix = f"[{label}] "
        self.container = container
        self.uid = pod_uid(pod)
        self.see(pod)
        self.deleted = False
        self.changed = False  # updated since the follow last looked (see wait_change)
        self.waiter: asyncio.Future[None] | None = None  # while the follow waits for a change
        self.cursor = LogCursor(cursor)
        self.restarts_read: int | None = None  # restartCount when we last caught up on instances
        # Why lines of this pod may not have been emitted (None: the last read reached the end of its log).
        self.unread: str | None = "its log was not read"
        self.tail: deque[str] = deque(maxlen=max(tail, 0))  # its last lines
        self.task: asyncio.Task[None] | None = None  # its follow
        self.stream: LogStream | None = None  # the open log stream
        self.said = False  # the open stream emitted a line
        self.done = False  # the follow is over

    def see(self, pod: Mapping[str, Any]) -> None:
        """Keep what the follow reads of ``pod`` (the same pod, as read again)."""
        status = pod.get("status") or {}
        self.phase = str(status.get("phase") or "")
        container: Mapping[str, Any] = {}
        for found in status.get("containerStatuses") or []:
            if found.get("name") == self.container:
                container = found
                break
        state = container.get("state") or {}
        self.running = bool(state.get("running"))
        # Whether the container has started at some point (so it has a log to read).
        self.has_run = bool(
            state.get("running")
            or state.get("terminated")
            or (container.get("lastState") or {}).get("terminated")
        )
        self.restarts = int(container.get("restartCount") or 0)

    def update(self, pod: dict[str, Any] | None) -> None:
        if pod is None:
            self.deleted = True
        else:
            self.see(pod)
        self.changed = True
        if self.waiter is not None:
            _wake(self.waiter)

    async def wait_change(self, timeout: float | None = None) -> None:
        """Until the pod changes (or ``timeout`` s), unless it changed since ``changed`` was cleared.

        The future is awaited itself, the timeout a timer that resolves it: not ``asyncio.wait_for``, which
        on Python 3.11 returns normally when the task is cancelled just as the future completes (a change
        and the streamer's stop in the same step), so the follow went on to wait forever."""
        if self.changed:
            return
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    @property
    def read_to_end(self) -> bool:
        """Whether every line of its container was read: its last read or stream reached the end of the log,
        and the container, as last seen, neither runs nor restarted since (nothing more can come)."""
        return self.unread is None and not self.running and self.restarts == (self.restarts_read or 0)

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    @property
    def label(self) -> str:
        """The replica as its lines are prefixed: ``master-0``."""
        return self.prefix.strip()[1:-1]


class PodFollower:
    """Follows pods and reads their logs for one streamer: the lines not emitted before go to ``emit`` with
    their pod, those of one read at once (``"<timestamp> <text>"`` each, as read with ``timestamps=true``, in
    order); ``note`` gets the line saying a pod's follow stopped on an error."""

    def __init__(
        self,
        hook: AsyncTrainingJobHook,
        namespace: str,
        *,
        emit: Callable[[FollowedPod, list[str]], None],
        note: Callable[[str], None],
        retry_interval: float,
    ) -> None:
        self.hook = hook
        self.namespace = namespace
        self.emit = emit
        self.note = note
        self.retry_interval = retry_interval

    async def follow(self, pod: FollowedPod) -> None:
        """The pod's follow: its log streamed while its container runs, read when it stopped, until the pod
        ends or goes."""
        try:
            while not pod.deleted:
                pod.changed = False
                if not pod.has_run:
                    if pod.phase in TERMINAL_PHASES:
                        return  # it ended without ever starting this container
                    await pod.wait_change()
                    continue
                await self._catch_up_restarts(pod, pod.restarts)
                if not pod.running:
                    if not pod.read_to_end:  # a stream that ended with the container read everything
                        await self.read(pod)
                    if pod.phase in TERMINAL_PHASES:
                        return
                    await pod.wait_change()
                    continue
                await self._stream(pod)
                await self._after_stream(pod)
        except Exception as err:  # one pod's trouble must not end the others' streams
            self.note(f"Stopped streaming the logs of pod {pod.name}: {err}")  # the task log's, not ours

    async def _catch_up_restarts(self, pod: FollowedPod, restarts: int) -> None:
        """Read the previous instance first when the container restarted since we last looked."""
        if restarts > (pod.restarts_read if pod.restarts_read is not None else 0):
            await self.read(pod, previous=True)
        pod.restarts_read = restarts

    async def _stream(self, pod: FollowedPod) -> None:
        """Follow the pod's log from its cursor, emitting its lines as they come, until the stream ends (the
        container did: everything it wrote was read) or could not be opened or broke (resumed later)."""
        fresh = pod.cursor.session()
        pod.said = False
        pod.unread = "its log stream was interrupted"
        step = _Steps()  # a backlog's next lines come without a suspension
        try:
            stream = pod.stream = await self.hook.open_log(
                self.namespace, pod.name, pod.container, since_time=pod.cursor.since(), timestamps=True
            )
            while (read := await stream.lines()) is not None:
                if self._take(pod, fresh, [line.decode("utf-8", errors="replace") for line in read]):
                    pod.said = True
                await step.pause()
        except Exception as err:
            self._interrupted(pod, err)
            return
        finally:
            pod.close_stream()
        pod.unread = None  # the stream ended with the container: everything it wrote was read

    def _interrupted(self, pod: FollowedPod, err: Exception) -> None:
        """A stream that could not be opened or broke: resumed later, unless the error says never."""
        pod.unread = _unreadable(err)
        if not _retry_later(err):
            raise err
        log.debug("Log stream of pod %s interrupted (%s); resuming", pod.name, err)

    async def _after_stream(self, pod: FollowedPod) -> None:
        """After a stream. One that ended with its container (nothing unread) usually ends before the
        kubelet reports the container's end: the pod watch brings that (or a restart, or the pod's
        deletion), so the pod is neither read nor followed again meanwhile. Only when the watch brings no
        change within ``retry_interval``, or the stream broke, is the pod read again (gone, or another
        incarnation: deleted); a running pod whose stream said nothing is not followed again before
        ``retry_interval`` (or a change)."""
        if pod.unread is None and not pod.deleted:
            if pod.running:
                pod.changed = False  # a change seen before the end is in what it says: still running
                await pod.wait_change(self.retry_interval)
            if pod.changed or not pod.running:
                return
        try:
            fresh = await self.hook.get_pod(self.namespace, pod.name)
        except Exception as err:
            if not is_transient(err):
                raise
            await pod.wait_change(self.retry_interval)
            return
        if fresh is not None and pod_uid(fresh) == pod.uid:
            pod.see(fresh)  # its own read: not a change to wake for
        else:
            pod.update(None)
        running = fresh is not None and (fresh.get("status") or {}).get("phase") == "Running"
        if not pod.said and running:
            pod.changed = False
            await pod.wait_change(self.retry_interval)  # nothing new: do not spin on a quiet one

    async def read(self, pod: FollowedPod, *, previous: bool = False) -> None:
        """Read the pod's log (its previous instance's) from its cursor and emit what was not emitted."""
        fresh = pod.cursor.session()
        try:
            text = await self.hook.read_log(
                self.namespace,
                pod.name,
                pod.container,
                since_time=pod.cursor.since(),
                previous=previous,
                timestamps=True,
            )
        except Exception as err:
            # After a follow that ended with the container (unread None) nothing is missing: a failed extra
            # read, e.g. a 400 once the name belongs to the pod's next incarnation, loses no line.
            if pod.unread is not None:
                pod.unread = _unreadable(err)
            if not _retry_later(err):
                raise
            return
        if not previous:
            pod.unread = None
        step = _Steps()
        for lines in _pieces(text):
            self._take(pod, fresh, lines)
            await step.pause()

    def _take(self, pod: FollowedPod, fresh: Session, lines: list[str]) -> bool:
        """Emit those of one read's ``lines`` that were not emitted before; whether there were any."""
        skipped = fresh.take(lines)
        if skipped == len(lines):
            return False
        self.emit(pod, lines[skipped:] if skipped else lines)
        return True


class _Steps:
    """Ends the current step of the event loop once it has run ``STEP_SECONDS``."""

    __slots__ = ("began",)

    def __init__(self) -> None:
        self.began = time.perf_counter()

    async def pause(self) -> None:
        if time.perf_counter() - self.began >= STEP_SECONDS:
            await asyncio.sleep(0)
            self.began = time.perf_counter()


def _pieces(text: str) -> Iterator[list[str]]:
    """``text``'s lines, split on ``\\n`` only (as a stream's: a log line may hold ``\\r``), about
    ``PIECE_CHARS`` characters of them at a time (not all in one step)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + PIECE_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[start:end].removesuffix("\n").split("\n")
        start = end


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _retry_later(err: BaseException) -> bool:
    """Errors after which a pod's log may be read later: not started (400), gone (404), transient."""
    if isinstance(err, KubeApiError) and err.status in (400, 404):
        return True
    return is_transient(err)


def _unreadable(err: BaseException) -> str:
    """Why a log read failed, for the note on what could not be read."""
    if isinstance(err, KubeApiError) and err.status == 404:
        return "the pod was deleted"
    return str(err) or type(err).__name__


def pod_uid(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("metadata") or {}).get("uid")

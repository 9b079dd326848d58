"""Replica logs for the Training tab: a tail, and a live follow shared per pod, resumable by cursor.

Lines are read with the kubelet's timestamps and filtered with :class:`~airflow_provider_training.logs.
LogCursor`, as the trigger's streamer does, so a reader that resumes from a cursor gets every later line once.
A cursor is ``<pod uid>.<timestamp ns>.<lines with that timestamp>``; one of another pod incarnation starts
over.

:class:`PodFollow` keeps one ``follow`` request per pod (and container) in this api-server process, however
many tabs stream it: each tab first reads what it missed since its cursor (one request when it connects),
then takes the shared follow's lines, skipping those it already sent. A tab that falls
:data:`LISTENER_LINES` lines behind is cut off and reconnects from its last ``id``.

When the api-server shuts down, every stream ends (without an ``end`` event), so the server need not wait for
the browsers to go: the tabs reconnect from their last ``id`` to the api-server that replaces it. uvicorn (the
api-server's server, also inside gunicorn's uvicorn workers) tells an open response nothing when it shuts
down, and waits for it up to its graceful-shutdown timeout; :func:`server_exiting` reads its ``should_exit``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.log_cursor import LogCursor, split_stamp, stamp_text
from airflow_provider_training.plugins.ui_cluster import describe_failure

LISTENER_LINES = 10_000
RETRY_SECONDS = 2.0
KEEPALIVE_SECONDS = 15.0
SHUTDOWN_POLL_SECONDS = 0.5
_TERMINAL = ("Succeeded", "Failed")


def encode_cursor(uid: str, cursor: LogCursor) -> str | None:
    state = cursor.state()
    return None if state is None else f"{uid}.{state[0]}.{state[1]}"


def decode_cursor(text: str | None, uid: str) -> LogCursor | None:
    """The cursor for this pod incarnation; ``None`` (start over) for none, a malformed one or another's."""
    parts = (text or "").rsplit(".", 2)
    if len(parts) != 3 or parts[0] != uid or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return LogCursor([int(parts[1]), int(parts[2])])


def read_lines(text: str, cursor: LogCursor) -> Iterator[dict[str, Any]]:
    """The lines of a timestamped log read that ``cursor`` has not passed yet, advancing it line by line
    (so the cursor after each line is where a reader that got just that far resumes)."""
    fresh = cursor.session()
    for line in text.splitlines():
        key, body = split_stamp(line)
        if fresh(key):
            yield line_of(key, body)


def line_of(key: int | None, text: str) -> dict[str, Any]:
    return {"time": stamp_text(key) if key is not None else None, "text": text}


class _Listener:
    """One tab's queue of a shared follow's lines (``None`` ends it)."""

    def __init__(self) -> None:
        self.items: collections.deque[tuple[int | None, str] | None] = collections.deque()
        self.ready = asyncio.Event()
        self.dropped = False  # fell too far behind: the tab reconnects from its last id
        self.closed = False  # the server shuts down: the tab reconnects from its last id to the next one
        self.end: str | None = None

    def put(self, item: tuple[int | None, str] | None) -> None:
        if item is not None and len(self.items) >= LISTENER_LINES:
            self.dropped = True
        else:
            self.items.append(item)
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()


class PodFollow:
    """One live ``follow`` of a pod's container, fanned out to every listener; ends when nobody listens."""

    def __init__(self, hook: AsyncTrainingJobHook, namespace: str, pod: str, uid: str, container: str):
        self.hook, self.namespace, self.pod, self.uid, self.container = hook, namespace, pod, uid, container
        self.key = _key(hook, namespace, pod, uid, container)
        self.cursor = LogCursor()  # set when the follow starts (_start)
        self.listeners: set[_Listener] = set()
        self.end: str | None = None
        self.task: asyncio.Task[None] | None = None

    def join(self) -> _Listener:
        listener = _Listener()
        self.listeners.add(listener)
        _watch_shutdown()
        if server_exiting():
            listener.close()
        elif self.end is not None:
            listener.end = self.end
            listener.put(None)
        elif self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"training-tab logs {self.pod}"
            )
        return listener

    def leave(self, listener: _Listener) -> None:
        self.listeners.discard(listener)
        if not self.listeners and self.task is not None:
            self.task.cancel()
            self._forget()

    def _forget(self) -> None:
        if _FOLLOWS.get(self.key) is self:
            del _FOLLOWS[self.key]

    async def _run(self) -> None:
        reason = "the log could not be followed"
        try:
            reason = await self._follow()
        except Exception as err:
            reason = f"the log could not be followed: {describe_failure(err, self.hook.kubernetes_conn_id)}"
        finally:
            self.end = reason
            self._forget()
            for listener in list(self.listeners):
                listener.end = reason
                listener.put(None)

    async def _follow(self) -> str:
        """Follow until the container is done for good (or the pod is gone); returns why it ended."""
        while True:
            try:
                if self.cursor.key is None:
                    await self._start()
                fresh = self.cursor.session()
                async for line in self.hook.follow_log(
                    self.namespace, self.pod, self.container, since_time=self.cursor.since(), timestamps=True
                ):
                    key, text = split_stamp(line)
                    if fresh(key):
                        for listener in list(self.listeners):
                            listener.put((key, text))
                pod = await self.hook.get_pod(self.namespace, self.pod)
            except KubeApiError as err:
                if err.status == 404:
                    return "the pod was deleted"
                if err.status != 400 and not is_transient(err):  # 400: the container has not started yet
                    raise
                pod = {}
            except Exception as err:
                if not is_transient(err):
                    raise
                pod = {}
            if pod is None or (pod and (pod.get("metadata") or {}).get("uid") != self.uid):
                return "the pod was deleted"
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                return f"the pod {pod['status']['phase'].lower()}"
            await asyncio.sleep(RETRY_SECONDS)  # restarting, or not started yet: look again

    async def _start(self) -> None:
        """Start a second back on the API server's clock: the kubelet stamps the lines, and takes
        ``sinceTime``, on its node's, which keeps the server's time, not this machine's. The overlap with a
        listener's own catch-up read is filtered by its cursor.

        The clock is the connection's configuration's, which the tab's route read the job with (just now, or
        for the snapshot it shares), so it has seen the server; only when it has not (the configuration was
        loaded again since, the kubeconfig file having changed), a read of the pod sets it."""
        clock = await self.hook.server_clock()
        if not clock.known:
            await self.hook.get_pod(self.namespace, self.pod)
        self.cursor = LogCursor([(int(clock.now().timestamp()) - 1) * 1_000_000_000, 0])


_FOLLOWS: dict[tuple[Any, ...], PodFollow] = {}
_SHUTDOWN_WATCHES: dict[int, asyncio.Task[None]] = {}


def server_exiting() -> bool:
    """Whether the uvicorn server of this process is shutting down: its ``Server`` owns the SIGTERM handler
    that it installs while it serves, and sets ``should_exit`` on the signal. ``False`` where that cannot be
    told (another server, or a uvicorn in a thread, which installs no handler)."""
    owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return getattr(owner, "should_exit", False) is True


def _watch_shutdown() -> None:
    """Close every listener on this event loop once the server shuts down; one watch per loop, while it
    has follows."""
    loop = asyncio.get_running_loop()
    if id(loop) not in _SHUTDOWN_WATCHES:
        _SHUTDOWN_WATCHES[id(loop)] = loop.create_task(
            _close_on_shutdown(id(loop)), name="training-tab shutdown"
        )


async def _close_on_shutdown(loop_id: int) -> None:
    try:
        while follows := [f for key, f in _FOLLOWS.items() if key[0] == loop_id]:
            if server_exiting():
                for follow in follows:
                    for listener in list(follow.listeners):
                        listener.close()
                return
            await asyncio.sleep(SHUTDOWN_POLL_SECONDS)
    finally:
        del _SHUTDOWN_WATCHES[loop_id]


def _key(hook: AsyncTrainingJobHook, *rest: str) -> tuple[Any, ...]:
    return (id(asyncio.get_running_loop()), hook.kubernetes_conn_id, *rest)


def shared_follow(
    hook: AsyncTrainingJobHook, namespace: str, pod: str, uid: str, container: str
) -> PodFollow:
    key = _key(hook, namespace, pod, uid, container)
    follow = _FOLLOWS.get(key)
    if follow is None:
        follow = _FOLLOWS[key] = PodFollow(hook, namespace, pod, uid, container)
    return follow


def following() -> int:
    """How many pods this process follows for tabs now (for tests and benchmarks)."""
    return len(_FOLLOWS)


def sse(event: str, data: Any, event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


async def ended(reason: str) -> AsyncIterator[str]:
    """A stream with nothing to follow: just its ``end``."""
    yield sse("end", {"reason": reason})


async def stream(
    hook: AsyncTrainingJobHook,
    namespace: str,
    pod: str,
    uid: str,
    container: str,
    cursor: LogCursor | None,
    tail: int,
) -> AsyncIterator[str]:
    """Server-sent events: each new line (``id`` the cursor after it), then ``end`` when the pod is done.

    Without a cursor it starts with the last ``tail`` lines."""
    follow = shared_follow(hook, namespace, pod, uid, container)
    listener = follow.join()
    try:
        since = cursor.since() if cursor is not None else None
        cursor = cursor or LogCursor()
        try:
            text = await hook.read_log(
                namespace,
                pod,
                container,
                since_time=since,
                tail_lines=None if since else tail,
                timestamps=True,
            )
        except KubeApiError as err:
            if err.status not in (400, 404):
                raise
            text = ""
        for line in read_lines(text, cursor):
            yield sse("line", line, encode_cursor(uid, cursor))
        fresh = cursor.session()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listener.ready.wait(), KEEPALIVE_SECONDS)
            listener.ready.clear()
            if listener.closed:
                return  # the client reconnects with its last id, to the next api-server
            if not listener.items and not listener.dropped:
                yield ": keepalive\n\n"
            while listener.items:
                item = listener.items.popleft()
                if item is None:
                    yield sse("end", {"reason": listener.end or "the log ended"})
                    return
                if fresh(item[0]):
                    yield sse("line", line_of(*item), encode_cursor(uid, cursor))
            if listener.dropped:
                return  # the client reconnects with its last id
    finally:
        follow.leave(listener)

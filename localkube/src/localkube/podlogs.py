"""Container logs kept per container instance (so `previous=true` works) and the kubelet's `/log` endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from localkube.store import ApiError

_TRUE = ("true", "1")
log = logging.getLogger(__name__)


def rfc3339_nano(ts_ns: int) -> str:
    """`2026-11-29T12:00:00.123456789Z`, as the kubelet prefixes lines with `timestamps=true`."""
    seconds, nanos = divmod(ts_ns, 1_000_000_000)
    return f"{_second_text(seconds)}.{nanos:09d}Z"


# Each second formatted once: a real kubelet's log files hold the timestamps as text already, so a backlog
# of 200,000 lines is served with them at once; formatting each line's took this kubelet half a second.
@functools.lru_cache(maxsize=64)
def _second_text(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class _Instance:
    """One run of a container: its lines `(timestamp ns, text with newline)`, whether it ended."""

    lines: list[tuple[int, str]] = field(default_factory=list)
    closed: bool = False
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)

    def notify(self) -> None:
        for loop, event in self.waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed
                loop.call_soon_threadsafe(event.set)


class PodLogs:
    """Log lines per (namespace, pod, container), one list per container instance. Thread-safe.

    `now_ns`: the node's clock, which stamps the lines and measures `sinceSeconds` (LocalKube's is the
    server's, `clock_offset` included: a cluster's nodes and API server keep one time)."""

    def __init__(self, now_ns: Callable[[], int] = time.time_ns) -> None:
        self.now_ns = now_ns
        self._lock = threading.Lock()
        self._containers: dict[tuple[str, str, str], list[_Instance]] = {}

    def start_container(self, namespace: str, pod: str, container: str) -> None:
        """Begin a new instance (a start or a restart); the previous one ends."""
        with self._lock:
            instances = self._containers.setdefault((namespace, pod, container), [])
            if instances and not instances[-1].closed:
                instances[-1].closed = True
                instances[-1].notify()
            instances.append(_Instance())

    def write(self, namespace: str, pod: str, container: str, text: str) -> None:
        """Append the lines of `text` (a missing final newline is added), timestamped now."""
        if not text:
            return
        now = self.now_ns()
        with self._lock:
            instances = self._containers.setdefault((namespace, pod, container), [])
            if not instances or instances[-1].closed:
                instances.append(_Instance())
            current = instances[-1]
            current.lines.extend((now, line + "\n") for line in text.removesuffix("\n").split("\n"))
            current.notify()

    def close_container(self, namespace: str, pod: str, container: str) -> None:
        """The current instance terminated: followers get the rest and end."""
        with self._lock:
            for instance in self._containers.get((namespace, pod, container), [])[-1:]:
                instance.closed = True
                instance.notify()

    def forget_pod(self, namespace: str, pod: str) -> None:
        with self._lock:
            for key in [k for k in self._containers if k[:2] == (namespace, pod)]:
                for instance in self._containers.pop(key):
                    instance.closed = True
                    instance.notify()

    def instances(self, namespace: str, pod: str, container: str) -> list[_Instance]:
        with self._lock:
            return list(self._containers.get((namespace, pod, container), []))

    def text(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> str:
        """The whole log of the current (or previous) instance, for assertions."""
        instances = self.instances(namespace, pod, container)
        chosen = instances[-2:-1] if previous else instances[-1:]
        with self._lock:
            return "".join(text for _, text in chosen[0].lines) if chosen else ""

    async def _wait(self, instance: _Instance, seen: int) -> None:
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if len(instance.lines) > seen or instance.closed:
                return
            instance.waiters.append(entry)
        try:
            await event.wait()
        finally:
            with self._lock:
                instance.waiters.remove(entry)


@dataclass
class _LogQuery:
    container: str
    follow: bool
    previous: bool
    timestamps: bool
    tail: int | None
    since_ns: int | None
    limit_bytes: int | None


def _int_param(query: Mapping[str, str], name: str) -> int | None:
    if query.get(name) in (None, ""):
        return None
    try:
        return int(query[name])
    except ValueError:
        raise ApiError.bad_request(f'{name}: Invalid value: "{query[name]}"') from None


def _since_ns(query: Mapping[str, str], now_ns: int) -> int | None:
    since_seconds = _int_param(query, "sinceSeconds")
    since_time = query.get("sinceTime")
    if since_seconds is not None and since_time:
        raise ApiError(422, "Invalid", "at most one of `sinceTime` or `sinceSeconds` may be specified")
    if since_seconds is not None:
        return now_ns - since_seconds * 1_000_000_000
    if since_time:
        try:
            parsed = datetime.fromisoformat(since_time.replace("Z", "+00:00"))
        except ValueError:
            raise ApiError.bad_request(f'sinceTime: Invalid value: "{since_time}"') from None
        return int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000
    return None


def container_of(pod: dict, requested: str | None) -> str:
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = [c.get("name") for c in spec.get("containers") or []]
    init = [c.get("name") for c in spec.get("initContainers") or []]
    if not requested:
        if len(containers) == 1:
            return str(containers[0])
        choice = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
        if init:
            choice += f" or one of the init containers: [{' '.join(init)}]"
        raise ApiError.bad_request(choice)
    if requested not in containers + init:
        raise ApiError.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def _waiting_reason(pod: dict, container: str) -> str | None:
    """The waiting reason of a container that never ran (restartCount 0), from the pod status."""
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        waiting = entry.get("name") == container and "waiting" in (entry.get("state") or {})
        if waiting and not entry.get("restartCount"):
            return str(entry["state"]["waiting"].get("reason") or "ContainerCreating")
    return None


def _parse_query(pod: dict, query: Mapping[str, str], container: str | None, now_ns: int) -> _LogQuery:
    return _LogQuery(
        container=container_of(pod, container),
        follow=query.get("follow", "").lower() in _TRUE,
        previous=query.get("previous", "").lower() in _TRUE,
        timestamps=query.get("timestamps", "").lower() in _TRUE,
        tail=_int_param(query, "tailLines"),
        since_ns=_since_ns(query, now_ns),
        limit_bytes=_int_param(query, "limitBytes"),
    )


def _choose_instance(logs: PodLogs, pod: dict, q: _LogQuery) -> _Instance:
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    instances = logs.instances(namespace, name, q.container)
    if q.previous:
        if len(instances) < 2:
            raise ApiError.bad_request(
                f'previous terminated container "{q.container}" in pod "{name}" not found'
            )
        return instances[-2]
    waiting = _waiting_reason(pod, q.container)
    if not instances or waiting:
        reason = waiting or "ContainerCreating"
        raise ApiError.bad_request(f'container "{q.container}" in pod "{name}" is waiting to start: {reason}')
    return instances[-1]


def _since(lines: list[tuple[int, str]], q: _LogQuery) -> list[tuple[int, str]]:
    """The lines from `sinceTime` / `sinceSeconds` on: the kubelet applies it to followed lines too."""
    return [line for line in lines if q.since_ns is None or line[0] >= q.since_ns]


def _render(lines: list[tuple[int, str]], q: _LogQuery) -> str:
    return "".join(f"{rfc3339_nano(ts)} {text}" if q.timestamps else text for ts, text in lines)


async def serve_pod_log(
    request: web.Request, pod: dict, logs: PodLogs, container: str | None
) -> web.StreamResponse:
    """A container's log with the kubelet's query parameters (follow, tailLines, ...): the answer to the API's
    GET .../pods/{name}/log (`container` from the query) and to the kubelet's GET
    /containerLogs/{namespace}/{pod}/{container}. `container` None: the pod's only container."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    q = _parse_query(pod, request.query, container, logs.now_ns())
    instance = _choose_instance(logs, pod, q)
    with logs._lock:
        lines, seen = _since(instance.lines, q), len(instance.lines)
    if q.tail is not None:
        lines = lines[-q.tail :] if q.tail > 0 else []
    budget = q.limit_bytes
    head = _render(lines, q).encode()
    if budget is not None:
        head = head[:budget]
        budget -= len(head)
    if not q.follow:
        return web.Response(body=head, content_type="text/plain", charset="utf-8")
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        await response.write(head)
        await _follow(response, logs, instance, seen, q, budget)
        await response.write_eof()
    except ConnectionError:  # aiohttp's ClientConnectionResetError: the follower went away, as followers do
        log.debug("localkube: the follower of the log of pod %s/%s went away", namespace, name)
    return response


async def _follow(
    response: web.StreamResponse,
    logs: PodLogs,
    instance: _Instance,
    seen: int,
    q: _LogQuery,
    budget: int | None,
) -> None:
    """Write the lines after line ``seen`` as they come, until the instance ends or the budget is spent."""
    while budget is None or budget > 0:
        await logs._wait(instance, seen)
        with logs._lock:
            fresh, seen, closed = instance.lines[seen:], len(instance.lines), instance.closed
        chunk = _render(_since(fresh, q), q).encode()
        if budget is not None:
            chunk = chunk[:budget]
            budget -= len(chunk)
        if chunk:
            await response.write(chunk)
        if closed and not fresh:
            break

"""Programmable faults: throttling, server errors, RBAC denials (403), dropped connections, latency, expired
or ended watches, and gates that hold requests until a test opens them.

Rules match requests by method, path regex and resource plural; each answers `count` matching requests
(None = all of them) and then expires. Thread-safe: tests program them from any thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aiohttp import web

from localkube.gates import Gate, gate, open_gate

ACTIONS = ("status", "drop", "latency", "expire_watch", "end_watch", "hold")
_STATUS_TEXT = {
    400: ("BadRequest", "container is waiting to start: ContainerCreating"),  # a log read, as kube-apiserver
    403: ("Forbidden", 'forbidden: User "system:serviceaccount:default:airflow" cannot access this resource'),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}
_RESOURCE_RE = re.compile(r"^/(?:api/v1|apis/[^/]+/[^/]+)/(?:namespaces/[^/]+/)?(?P<plural>[^/]+)")


def resource_of(path: str) -> str | None:
    """The resource plural an API path addresses (`pods`, `pytorchjobs`), or None."""
    match = _RESOURCE_RE.match(path)
    return match["plural"] if match and match["plural"] != "namespaces" else None


def is_watch(query: Any) -> bool:
    return str(query.get("watch", "")).lower() in ("true", "1")


@dataclass
class FaultRule:
    """One fault. `action`: status (answer with `code`), drop (close the connection), latency (wait
    `seconds`, then serve), expire_watch (the watch gets one ERROR 410 event), end_watch (the watch ends
    after `seconds`), hold (wait at the gate named `gate` until it is opened, then serve)."""

    action: str
    code: int = 0
    count: int | None = 1
    method: str | None = None
    path: str | None = None
    resource: str | None = None
    retry_after: int = 1
    seconds: float = 0.0
    gate: str = ""
    hits: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; one of {', '.join(ACTIONS)}")
        if self.action == "status" and self.code not in _STATUS_TEXT:
            raise ValueError(f"status faults answer one of {sorted(_STATUS_TEXT)}, not {self.code}")
        if self.action == "hold" and not self.gate:
            raise ValueError("a hold fault names its gate")

    def matches(self, method: str, path: str, watch: bool) -> bool:
        if self.action in ("expire_watch", "end_watch") and not watch:
            return False
        if self.method and self.method.upper() != method.upper():
            return False
        if self.path and not re.search(self.path, path):
            return False
        # "pytorchjobs" and "pytorchjobs.kubeflow.org" both name the plural in the path
        return not self.resource or self.resource.split(".", 1)[0] == resource_of(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultRule:
        known = {f.name for f in fields(cls)} - {"hits"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# where the middleware leaves watch rules for the watch handler
EXPIRE_WATCH = web.RequestKey("expire_watch", FaultRule)
END_WATCH = web.RequestKey("end_watch", FaultRule)


class Faults:
    """The fault rules of one cluster, plus the open watch streams (to end them) and the restart hook."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._watch_closers: dict[int, Callable[[], None]] = {}
        self._next_watch = 0
        self._gates: set[str] = set()  # the gates this cluster's hold faults used, opened on clear/stop
        self.restart_hook: Callable[[], Any] | None = None

    # -- programming ---------------------------------------------------------------------------------------
    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(self, code: int, count: int | None = 1, *, retry_after: int = 1, **match: Any) -> FaultRule:
        """Answer the next `count` matching requests with `code` (429 carries Retry-After)."""
        return self.add(FaultRule("status", code=code, count=count, retry_after=retry_after, **match))

    def throttle(self, count: int | None = 1, *, retry_after: int = 1, **match: Any) -> FaultRule:
        return self.fail(429, count, retry_after=retry_after, **match)

    def drop(self, count: int | None = 1, **match: Any) -> FaultRule:
        """Close the connection of the next `count` matching requests without an answer."""
        return self.add(FaultRule("drop", count=count, **match))

    def latency(self, seconds: float, count: int | None = None, **match: Any) -> FaultRule:
        return self.add(FaultRule("latency", seconds=seconds, count=count, **match))

    def expire_watch(self, count: int | None = 1, **match: Any) -> FaultRule:
        """The next `count` matching watches get an ERROR 410 Expired event and end."""
        return self.add(FaultRule("expire_watch", count=count, **match))

    def end_watch_after(self, seconds: float, count: int | None = 1, **match: Any) -> FaultRule:
        """The next `count` matching watches end (without a bookmark) after `seconds`."""
        return self.add(FaultRule("end_watch", seconds=seconds, count=count, **match))

    def hold(self, gate: str, count: int | None = 1, **match: Any) -> Gate:
        """Hold the next `count` matching requests at the gate `gate` (closed now, if it was open), before
        they are served."""
        held = self.gate(gate)
        held.close()
        self.add(FaultRule("hold", count=count, gate=gate, **match))
        return held

    def gate(self, name: str) -> Gate:
        with self._lock:
            self._gates.add(name)
        return gate(name)

    def open_gates(self) -> None:
        """Open every gate this cluster held requests at (nothing stays held once the cluster stops)."""
        with self._lock:
            names = list(self._gates)
        for name in names:
            open_gate(name)

    def end_watches(self) -> int:
        """End every open watch stream now, as a server does at its own timeout. Returns how many."""
        with self._lock:
            closers = list(self._watch_closers.values())
        for close in closers:
            close()
        return len(closers)

    def restart(self) -> Any:
        """Drop every connection and listen again on the same port; the state stays."""
        if self.restart_hook is None:
            raise RuntimeError("the cluster is not running")
        return self.restart_hook()

    def clear(self) -> None:
        """Drop every rule and let every held request through."""
        with self._lock:
            self._rules.clear()
        self.open_gates()

    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    # -- serving -------------------------------------------------------------------------------------------
    def take(self, method: str, path: str, watch: bool) -> list[FaultRule]:
        """The rules that apply to this request, first of each action only; counts are used up."""
        taken: list[FaultRule] = []
        with self._lock:
            for rule in list(self._rules):
                if any(t.action == rule.action for t in taken) or not rule.matches(method, path, watch):
                    continue
                rule.hits += 1
                taken.append(rule)
                if rule.count is not None and rule.hits >= rule.count:
                    self._rules.remove(rule)
        return taken

    def register_watch(self, close: Callable[[], None]) -> Callable[[], None]:
        """Register an open watch's closer; returns the function that unregisters it."""
        with self._lock:
            self._next_watch += 1
            ident = self._next_watch
            self._watch_closers[ident] = close

        def unregister() -> None:
            with self._lock:
                self._watch_closers.pop(ident, None)

        return unregister


def status_response(rule: FaultRule) -> web.Response:
    reason, message = _STATUS_TEXT[rule.code]
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": rule.code,
    }
    headers = {}
    if rule.code == 429:
        body["details"] = {"retryAfterSeconds": rule.retry_after}
        headers["Retry-After"] = str(rule.retry_after)
    return web.Response(
        status=rule.code, text=json.dumps(body), content_type="application/json", headers=headers
    )


def faults_middleware(faults: Faults) -> Callable[..., Awaitable[web.StreamResponse]]:
    """aiohttp middleware applying the matching rules to API requests (not to `/localkube/` admin calls)."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/localkube/"):
            return await handler(request)
        for rule in faults.take(request.method, request.path, is_watch(request.query)):
            if rule.action == "latency":
                await asyncio.sleep(rule.seconds)
            elif rule.action == "hold":
                await faults.gate(rule.gate).wait(f"{request.method} {request.path}")
            elif rule.action == "status":
                return status_response(rule)
            elif rule.action == "drop":
                if request.transport is not None:
                    request.transport.abort()
                raise asyncio.CancelledError
            else:  # watch rules: the watch handler reads them
                request[EXPIRE_WATCH if rule.action == "expire_watch" else END_WATCH] = rule
        return await handler(request)

    return middleware

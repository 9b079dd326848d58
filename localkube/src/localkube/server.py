"""The HTTP API: auth, request records, discovery, CRUD, list/watch, subresources and pod logs."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from aiohttp import web

from localkube import resources as discovery
from localkube.defaults import admit_create
from localkube.errors import PUBLIC_PATHS, anonymous_forbidden
from localkube.faults import (
    END_WATCH,
    EXPIRE_WATCH,
    FaultRule,
    faults_middleware,
    is_watch,
)
from localkube.kubeletapi import kubelet_url, proxy_container_log
from localkube.patches import APPLY
from localkube.podlogs import container_of, serve_pod_log
from localkube.resources import PODS, ResourceType
from localkube.runtime.kubelet import NODE_NAME
from localkube.store import ApiError, WatchEvent, now_rfc3339

if TYPE_CHECKING:
    from localkube.cluster import LocalKube

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_NOT_FOUND = ApiError(404, "NotFound", "the server could not find the requested resource")
_NOT_ALLOWED = ApiError(
    405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}
)


@dataclass
class RequestRecord:
    """One API request as the server saw it; `status` is set once the answer starts."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    status: int | None = None

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


RECORD = web.RequestKey("record", RequestRecord)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )


def error_response(error: ApiError) -> web.Response:
    return json_response(error.status_body(), error.code, error.headers)


def build_app(cluster: LocalKube) -> web.Application:
    """A fresh application for the cluster (a restart builds a new one over the same state)."""
    api = _Api(cluster)
    app = web.Application(
        middlewares=[api.record, api.errors, api.auth, faults_middleware(cluster.faults)],
        client_max_size=64 * 1024**2,
    )
    app.on_response_prepare.append(api.on_prepare)
    app.router.add_route("*", "/localkube/{tail:.*}", api.admin)
    app.router.add_route("*", "/{tail:.*}", api.dispatch)
    return app


def _watch_frame(type_: str, obj: dict) -> bytes:
    return (json.dumps({"type": type_, "object": obj}) + "\n").encode()


def _translate(event: WatchEvent, predicate: Callable[[dict], bool]) -> tuple[str, dict] | None:
    """What a selected watch reports: an object that starts matching is ADDED, one that stops is DELETED."""
    now = predicate(event.object)
    if event.type != "MODIFIED":
        return (event.type, event.object) if now else None
    before = event.old is not None and predicate(event.old)
    if now:
        return ("MODIFIED" if before else "ADDED"), event.object
    return ("DELETED", event.object) if before else None


class _Api:
    def __init__(self, cluster: LocalKube) -> None:
        self.cluster = cluster
        self.store = cluster.store

    # -- middlewares ---------------------------------------------------------------------------------------
    @web.middleware
    async def record(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/localkube/"):
            record = RequestRecord(request.method, request.path, dict(request.query))
            request[RECORD] = record
            self.cluster.requests.append(record)
        return await handler(request)

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if RECORD in request:
            request[RECORD].status = response.status
        if self.store.clock_offset:  # aiohttp adds its own Date only where none is set
            response.headers["Date"] = formatdate(time.time() + self.store.clock_offset, usegmt=True)

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            return error_response(error)
        except (ConnectionError, web.HTTPException):
            raise
        except Exception as exc:  # a bug of ours: answer as the real server does, with a Status
            if "secrets" in request.path.split("/"):  # the exception's text could quote a secret's value
                log.error("localkube: %s %s failed: %s", request.method, request.path, type(exc).__name__)
                return error_response(ApiError(500, "InternalError", "Internal error occurred"))
            log.exception("localkube: %s %s failed", request.method, request.path)
            return error_response(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    @web.middleware
    async def auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        if given is None:  # anonymous: kube-apiserver authenticates system:anonymous, whom RBAC refuses
            if request.path in PUBLIC_PATHS:
                return await handler(request)
            raise anonymous_forbidden(request.method, request.path, is_watch(request.query))
        if not hmac.compare_digest(given.encode(), f"Bearer {self.cluster.token}".encode()):
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    # -- routing -------------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"], ["healthz"], ["readyz"], ["livez"]):
            return self._simple(request, parts[0])
        if request.method != "GET" and len(parts) <= (2 if parts[:1] == ["api"] else 3):  # discovery
            raise _NOT_ALLOWED
        if parts == ["api"]:
            return json_response(discovery.api_versions(request.host))
        if parts == ["apis"]:
            return json_response(discovery.group_list(self.store.resource_types()))
        if parts[:1] == ["api"] and parts[1:2] == ["v1"]:
            return await self._resource(request, "", "v1", parts[2:])
        if parts[:1] == ["apis"] and len(parts) == 2:
            return json_response(discovery.group(self.store.resource_types(), parts[1]) or _raise(_NOT_FOUND))
        if parts[:1] == ["apis"] and len(parts) >= 3:
            return await self._resource(request, parts[1], parts[2], parts[3:])
        raise _NOT_FOUND

    def _simple(self, request: web.Request, what: str) -> web.Response:
        if what == "version":
            return json_response(discovery.VERSION)
        return web.Response(text="ok")

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        if not rest:
            listing = discovery.resource_list(self.store.resource_types(), group, version)
            return json_response(listing or _raise(_NOT_FOUND))
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and self._serves(group, version, rest[2]):
            namespace, rest = rest[1], rest[2:]  # else `namespaces/{name}/status`: a namespace's subresource
        rt = self.store.resource_type(group, version, rest[0])
        if rt.namespaced != (namespace is not None) and (len(rest) > 1 or namespace is not None):
            raise _NOT_FOUND  # an object of a namespaced type needs a namespace, a cluster-scoped one none
        if len(rest) == 1:
            return await self._collection(request, rt, namespace)
        if len(rest) > 3:
            raise _NOT_FOUND
        if len(rest) == 3:
            return await self._subresource(request, rt, namespace or "", rest[1], rest[2])
        return await self._object(request, rt, namespace or "", rest[1])

    def _serves(self, group: str, version: str, plural: str) -> bool:
        try:
            self.store.resource_type(group, version, plural)
        except ApiError:
            return False
        return True

    # -- verbs ---------------------------------------------------------------------------------------------
    async def _collection(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        if request.method == "GET" and is_watch(query):
            return await self._watch(request, rt, namespace)
        if request.method == "GET":
            limit = _limit(query.get("limit"))
            page = self.store.list_page(
                rt,
                namespace,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                limit,
                query.get("continue"),
            )
            meta: dict[str, Any] = {"resourceVersion": page.resource_version}
            if page.continue_token:
                meta.update({"continue": page.continue_token, "remainingItemCount": page.remaining})
            elif not rt.builtin:  # kube-apiserver writes a custom resource list's empty token too
                meta["continue"] = ""
            return json_response(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": meta,
                    "items": page.items,
                }
            )
        if request.method == "POST" and (namespace is not None or not rt.namespaced):
            body = await self._body(request)
            if query.get("fieldValidation") == "Strict":
                self._refuse_unknown_fields(rt, body)
            admit_create(rt, body)
            return json_response(self.store.create(rt, namespace or "", body), 201)
        if request.method == "DELETE" and "deletecollection" in discovery.verbs_of(rt):
            options = await self._body(request, optional=True)
            items = self.store.delete_collection(
                rt, namespace, query.get("labelSelector"), query.get("fieldSelector"), _policy(query, options)
            )
            return json_response(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": self.store.resource_version},
                    "items": items,
                }
            )
        raise _NOT_ALLOWED

    def _refuse_unknown_fields(self, rt: ResourceType, body: dict) -> None:
        """400 BadRequest, as kube-apiserver's strict decoder answers, for fields a custom resource's schema
        does not declare (built-in kinds are not checked here)."""
        schema = self.cluster.schema
        if schema is None or not schema.has(rt.group, rt.version, rt.plural):
            return
        unknown = sorted(
            schema.unknown_fields(rt.group, rt.version, rt.plural, body)
        )  # as kube-apiserver does
        if unknown:
            fields = ", ".join(f'unknown field "{path}"' for path in unknown)
            handled = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}'
            message = f"{handled}: strict decoding error: {fields}"
            raise ApiError(400, "BadRequest", message)

    async def _object(
        self,
        request: web.Request,
        rt: ResourceType,
        namespace: str,
        name: str,
        subresource: str | None = None,
    ) -> web.Response:
        if request.method == "GET":
            return json_response(self.store.get(rt, namespace, name))
        if request.method == "PUT":
            body = await self._body(request)
            if not rt.builtin and not (body.get("metadata") or {}).get("resourceVersion"):
                raise _unconditional_update(rt, name)  # custom resources allow no unconditional update
            return json_response(self.store.replace(rt, namespace, name, body, subresource))
        if request.method == "PATCH":
            body = await request.read()
            if _is_apply(request) and not request.query.get("fieldManager"):
                raise _FIELD_MANAGER_REQUIRED
            patched = self.store.patch(
                rt, namespace, name, body, request.headers.get("Content-Type", ""), subresource
            )
            return json_response(patched)
        if request.method == "DELETE" and subresource is None:
            options = await self._body(request, optional=True)
            preconditions = options.get("preconditions") or {}
            policy = _policy(request.query, options) or discovery.DEFAULT_PROPAGATION.get(rt)
            deleted = self.store.delete(rt, namespace, name, policy, preconditions)
            kept = _exists(self, rt, namespace, name)
            # the real server answers 202 only for a kept object whose request set orphanDependents=false
            accepted = options.get("orphanDependents") is False and kept
            return json_response(_delete_answer(rt, deleted, policy, kept), 202 if accepted else 200)
        raise _NOT_ALLOWED

    async def _subresource(
        self, request: web.Request, rt: ResourceType, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        if sub not in rt.subresources:
            raise _NOT_FOUND
        if sub in ("log", "binding"):
            if request.method != ("GET" if sub == "log" else "POST"):
                raise _NOT_ALLOWED
            return await (self._pod_log if sub == "log" else self._binding)(request, namespace, name)
        return await self._object(request, rt, namespace, name, sub)

    async def _pod_log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """From this process's pod runtime, or proxied to the kubelet of the registered node the pod is on."""
        pod = self.store.get(PODS, namespace, name)
        container = container_of(pod, request.query.get("container"))
        own_node = NODE_NAME if self.cluster.runtime not in (None, "none") else None
        if own_node and not (pod.get("spec") or {}).get("nodeName"):
            # kube-apiserver: no node yet, no kubelet to ask, no log (without a runtime, the test writing
            # the logs is every pod's kubelet)
            return web.Response(status=204)
        if url := kubelet_url(self.store, pod, own_node):
            return await proxy_container_log(request, url, pod, container)
        return await serve_pod_log(request, pod, self.cluster.logs, request.query.get("container"))

    async def _binding(self, request: web.Request, namespace: str, name: str) -> web.Response:
        """POST pods/{name}/binding, as a scheduler binds: set spec.nodeName; 409 for a pod bound already."""
        body = await self._body(request)
        node = (body.get("target") or {}).get("name")
        if not node:
            raise ApiError.bad_request("a Binding needs target.name: the node to bind the pod to")
        self.store.bind_pod(namespace, name, str(node), unbound_only=True)
        return json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
        )

    @staticmethod
    async def _body(request: web.Request, optional: bool = False) -> Any:
        raw = await request.read()
        if not raw.strip():
            if optional:
                return {}
            raise ApiError.bad_request("the request body is empty")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise ApiError.bad_request(f"the body of the request was not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request must be a JSON object")
        return body

    # -- watch ---------------------------------------------------------------------------------------------
    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        predicate = self.store._predicate(rt, query.get("labelSelector"), query.get("fieldSelector"))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            if EXPIRE_WATCH in request:
                rv = query.get("resourceVersion") or "0"
                raise ApiError.expired(f"too old resource version: {rv} ({self.store.resource_version})")
            initial, sub = self.store.watch(rt, namespace, query.get("resourceVersion"))
        except ApiError as error:
            if error.code != 410:
                raise
            await response.prepare(request)
            await response.write(_watch_frame("ERROR", error.status_body()))
            await response.write_eof()
            return response
        ended: FaultRule | None = request.get(END_WATCH)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(
            timeout if timeout is not None else 1800.0, ended.seconds if ended else 1800.0
        )
        unregister = self.cluster.faults.register_watch(sub.close)
        try:
            await response.prepare(request)
            for event in initial:
                if translated := _translate(event, predicate):
                    await response.write(_watch_frame(*translated))
            if bookmarks and _ends_initial_events(query):
                await response.write(self._bookmark(rt, sub.last_rv, initial_end=True))
            await self._stream(response, rt, sub, predicate, deadline, bookmarks, clean_end=ended is None)
            await response.write_eof()
        except ConnectionError:
            # A watcher going away (its client closed or timed out) is normal, not a server error.
            log.debug("watch client for %s went away", rt.key)
        finally:
            unregister()
            sub.close()
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        rt: ResourceType,
        sub: Any,
        predicate: Callable[[dict], bool],
        deadline: float,
        bookmarks: bool,
        clean_end: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        interval = self.cluster.bookmark_interval
        next_bookmark = loop.time() + interval
        while (now := loop.time()) < deadline:
            wait = min(deadline, next_bookmark if bookmarks else deadline) - now
            try:
                event = await asyncio.wait_for(anext(sub), max(wait, 0))
            except TimeoutError:
                if bookmarks and loop.time() >= next_bookmark:
                    await response.write(self._bookmark(rt, sub.last_rv))
                    next_bookmark = loop.time() + interval
                continue
            except StopAsyncIteration:  # ended by a fault or a restart
                return
            if translated := _translate(event, predicate):
                await response.write(_watch_frame(*translated))
                if (observer := self.cluster.watch_observer) is not None:
                    observer(rt.plural, *translated)
        if bookmarks and clean_end:
            await response.write(self._bookmark(rt, sub.last_rv))

    @staticmethod
    def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _watch_frame("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})

    # -- admin ---------------------------------------------------------------------------------------------
    async def admin(self, request: web.Request) -> web.Response:
        """`/localkube/faults` (GET list, POST add, DELETE clear), `/localkube/gates/{name}` (POST opens),
        `/localkube/end-watches`, `/localkube/restart`, `/localkube/requests`."""
        what = request.match_info["tail"].strip("/")
        faults = self.cluster.faults
        if what == "faults" and request.method == "POST":
            try:
                rule = faults.add(FaultRule.from_dict(await self._body(request)))
            except (TypeError, ValueError) as exc:
                raise ApiError.bad_request(str(exc)) from exc
            return json_response(rule.to_dict(), 201)
        if what == "faults" and request.method == "DELETE":
            faults.clear()
            return json_response({"cleared": True})
        if what == "faults":
            return json_response([rule.to_dict() for rule in faults.rules()])
        if what.startswith("gates/") and request.method == "POST":  # open a gate of hold faults
            faults.gate(what.removeprefix("gates/")).open()
            return json_response({"opened": what.removeprefix("gates/")})
        if what == "end-watches" and request.method == "POST":
            return json_response({"ended": faults.end_watches()})
        if what == "restart" and request.method == "POST":
            asyncio.get_running_loop().call_later(0.05, faults.restart)
            return json_response({"restarting": True})
        if what == "requests":
            return json_response([vars(r) for r in self.cluster.requests])
        raise _NOT_FOUND


def _raise(error: ApiError) -> Any:
    raise error


def _exists(api: _Api, rt: ResourceType, namespace: str, name: str) -> bool:
    try:
        api.store.get(rt, namespace, name)
    except ApiError:
        return False
    return True


_FIELD_MANAGER_REQUIRED = ApiError(
    422,
    "Invalid",
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
    {
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            }
        ],
    },
)


def _is_apply(request: web.Request) -> bool:
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower() == APPLY


_GC_FINALIZERS = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}


def _delete_answer(rt: ResourceType, deleted: dict, policy: str | None, kept: bool) -> dict:
    """What kube-apiserver answers a delete: the object when it is kept (finalizers; with Orphan or
    Foreground the garbage collector's finalizer, which it answers with before the collector runs, as
    localkube's synchronous collection has finished) or is of a kind that answers with it, else a
    `Success` Status."""
    gc_finalizer = _GC_FINALIZERS.get(policy or "")
    if gc_finalizer:
        meta = deleted["metadata"]
        if gc_finalizer not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), gc_finalizer]
        meta.setdefault("deletionTimestamp", now_rfc3339())
        meta.setdefault("deletionGracePeriodSeconds", 0)
    if kept or gc_finalizer or rt in discovery.RETURN_DELETED:
        return deleted
    details = {"name": deleted["metadata"]["name"], "group": rt.group, "kind": rt.plural}
    if not rt.group:
        del details["group"]
    details["uid"] = deleted["metadata"]["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _limit(value: str | None) -> int | None:
    """A list's `limit` (0 or less: no limit), 400 unless it is an integer, as kube-apiserver parses it."""
    if value is None:
        return None
    try:
        return max(int(value), 0) or None
    except ValueError:
        raise ApiError.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def _unconditional_update(rt: ResourceType, name: str) -> ApiError:
    message = "Invalid value: 0: must be specified for an update"
    return ApiError(
        422,
        "Invalid",
        f'{rt.key} "{name}" is invalid: metadata.resourceVersion: {message}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.plural,
            "causes": [
                {"reason": "FieldValueInvalid", "message": message, "field": "metadata.resourceVersion"}
            ],
        },
    )


def _ends_initial_events(query: Any) -> bool:
    """Whether kube-apiserver marks the end of a watch's initial events with a bookmark (when bookmarks are
    allowed): asked to (`sendInitialEvents=true`), or a watch without a resourceVersion (or "0"), which
    starts with the current objects."""
    send = query.get("sendInitialEvents", "").lower()
    return send == "true" or (send != "false" and query.get("resourceVersion") in (None, "", "0"))


def _policy(query: Any, options: dict) -> str | None:
    return (
        query.get("propagationPolicy")
        or options.get("propagationPolicy")
        or ("Orphan" if options.get("orphanDependents") is True else None)
    )

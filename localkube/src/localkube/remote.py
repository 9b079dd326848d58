"""`RemoteApi`: the `ClusterApi` over any Kubernetes API server, informer-style.

Reads come from a `Mirror`, a local `Store` that only reflects the server: it is filled by one LIST per
resource type (`sync`), then kept current by one WATCH per type, each in a thread of its own (`start`).
Writes are sent to the server at once (blocking: the controllers' and the kubelet's calls are synchronous)
and their answers are applied to the mirror before the call returns, so a caller reads its own writes and
its subscriptions see them as events, as on the in-process store. Every change, written or watched, reaches
the mirror through `Mirror.apply`, which lets an object's state in only if its resourceVersion is newer than
the one it holds (or, for a name deleted, newer than the deletion): the watch event of a write applied
already is not emitted a second time.

HTTP, kubeconfig handling and credentials (token, exec plugins, client certificates, CA) are the real
`kubernetes` client's; objects stay plain dicts (`_preload_content=False`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from localkube.copying import clone
from localkube.errors import ApiError
from localkube.resources import PODS, ResourceType
from localkube.store import IndexKey, Items, Store
from localkube.subscriptions import Subscription

if TYPE_CHECKING:
    import asyncio

    from kubernetes import client as k8s

log = logging.getLogger(__name__)

REQUEST_SECONDS = 60  # the longest a write or a LIST may take
WATCH_SECONDS = 300  # each watch asks the server to end it after this long; it is then resumed
RETRY_SECONDS = 1.0
MAX_TOMBSTONES = 10_000
JSON_PATCH = "application/json-patch+json"


def _rv(obj: dict) -> int:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return 0


class Mirror(Store):
    """A Store that only reflects another API: objects enter through `apply`, never through its own writes."""

    def __init__(self) -> None:
        super().__init__([], history_size=1)
        self._tombstones: OrderedDict[tuple[tuple[str, str, str], str, str], int] = OrderedDict()

    def apply(self, type_: str, rt: ResourceType, obj: dict) -> bool:
        """Let a server's state of `obj` in: ADDED or MODIFIED (upsert) or DELETED. Emits the change to the
        subscribers and returns True, unless the mirror holds this state or a newer one already."""
        rv = _rv(obj)
        meta = obj["metadata"]
        name = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        key = ((rt.group, rt.version, rt.plural), *name)
        with self._lock:
            if (rt.group, rt.version, rt.plural) not in self._types:
                return False
            current = self._objects.get(rt, name)
            self._rv = max(self._rv, rv)
            if type_ == "DELETED":
                if current is None:
                    self._bury(key, rv)
                    return False
                if rv and rv < _rv(current):
                    return False
                self._objects.pop(rt, current)
                self._bury(key, max(rv, _rv(current)))
                self._publish("DELETED", rt, obj, current)
                return True
            if current is not None and rv <= _rv(current):
                return False
            if current is None and rv <= self._tombstones.get(key, 0):
                return False
            self._tombstones.pop(key, None)
            obj = clone(obj)
            self._objects.put(rt, obj)
            self._publish("ADDED" if current is None else "MODIFIED", rt, obj, current)
            return True

    def replace_all(self, rt: ResourceType, items: list[dict], list_rv: int) -> None:
        """A fresh LIST of the type: apply each item, and delete what the server no longer has."""
        listed = {(i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items}
        for item in items:
            self.apply("ADDED", rt, item)
        with self._lock:
            gone = [obj for name, obj in self._iter(rt, None) if name not in listed]
        for obj in gone:
            tombstone = clone(obj)
            tombstone["metadata"]["resourceVersion"] = str(max(list_rv, _rv(obj)))
            self.apply("DELETED", rt, tombstone)

    def _bury(self, key: tuple[tuple[str, str, str], str, str], rv: int) -> None:
        self._tombstones[key] = max(rv, self._tombstones.pop(key, 0))
        while len(self._tombstones) > MAX_TOMBSTONES:
            self._tombstones.popitem(last=False)


def api_path(rt: ResourceType, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    """`/api/v1/namespaces/ns/pods/name/status`, `/apis/kubeflow.org/v1/pytorchjobs`, ..."""
    path = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    if rt.namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{rt.plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    if sub:
        path += f"/{sub}"
    return path


def _api_error(exc: Exception) -> ApiError:
    """The client's ApiException as localkube's ApiError (the server's Status, if it sent one)."""
    status = int(getattr(exc, "status", 0) or 500)
    raw = getattr(exc, "body", None) or b""
    try:
        body = json.loads(raw)
    except (ValueError, TypeError):
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError(
            int(body.get("code") or status),
            str(body.get("reason") or ""),
            str(body.get("message") or ""),
            body.get("details") or None,
        )
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or exc)
    return ApiError(status, str(getattr(exc, "reason", "") or "Unknown"), text.strip() or str(exc))


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class RemoteApi:
    """`ClusterApi` over HTTP: `sync()` (LIST every type), `start(loop)` (WATCH them), then use; `close()`."""

    def __init__(self, api_client: k8s.ApiClient, types: Iterable[ResourceType]) -> None:
        self.client = api_client
        self.mirror = Mirror()
        self.wanted = list(dict.fromkeys(types))
        self.skipped: list[ResourceType] = []  # types the server does not serve
        self._list_rvs: dict[ResourceType, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open: set[Any] = set()  # the watch responses being read, closed on close()
        self._open_lock = threading.Lock()

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | Path | None, types: Iterable[ResourceType], context: str | None = None
    ) -> RemoteApi:
        """A client for the kubeconfig's (current or given) context, with a connection per watch."""
        from kubernetes import client, config

        types = list(types)
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            context=context,
            client_configuration=configuration,
        )
        configuration.connection_pool_maxsize = len(types) + 8  # every watch holds a connection
        return cls(client.ApiClient(configuration), types)

    # -- lifecycle -----------------------------------------------------------------------------------------
    def sync(self) -> None:
        """LIST every wanted type into the mirror (blocking). A type the server does not serve is skipped."""
        for rt in self.wanted:
            try:
                items, rv = self._list(rt)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                log.info("localkube agent: the server does not serve %s; not watching it", rt.key)
                self.skipped.append(rt)
                continue
            self.mirror.register(rt)
            self.mirror.replace_all(rt, items, rv)
            self._list_rvs[rt] = rv

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """WATCH every synced type, each in a thread, delivering its events to the mirror on `loop`."""
        self._loop = loop
        for rt, rv in self._list_rvs.items():
            thread = threading.Thread(
                target=self._watch_loop, args=(rt, rv), name=f"watch {rt.key}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self._stop.set()
        with self._open_lock:
            responses = list(self._open)
        for response in responses:
            try:
                response.shutdown()  # unblocks the thread reading it
            except Exception:  # closed already
                log.debug("closing a watch", exc_info=True)
        for thread in self._threads:
            thread.join(5)
        self._threads = []
        self.client.close()

    # -- HTTP ----------------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
    ) -> Any:
        """One API call: the decoded JSON answer, or (stream=True) the open response. ApiError on failure."""
        import urllib3
        from kubernetes.client.rest import ApiException

        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            response = self.client.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=None if stream else REQUEST_SECONDS,
            )
        except ApiException as exc:
            raise _api_error(exc) from None
        except urllib3.exceptions.HTTPError as exc:  # no answer: the server is down or unreachable
            raise ApiError(503, "ServiceUnavailable", f"{method} {path}: {exc}") from None
        if stream:
            return response
        return json.loads(response.data or b"{}")

    def _list(self, rt: ResourceType) -> tuple[list[dict], int]:
        items: list[dict] = []
        query: dict[str, str] = {"limit": "500"}
        while True:
            page = self.request("GET", api_path(rt, None), query=query)
            for item in page.get("items") or []:  # list items carry no kind
                item.setdefault("apiVersion", rt.api_version)
                item.setdefault("kind", rt.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, int(meta.get("resourceVersion") or 0)
            query["continue"] = meta["continue"]

    def _deliver(self, fn: Any, *args: Any) -> None:
        """Run a mirror update on the loop the readers live on (in order, after what is queued)."""
        if self._loop is None:
            fn(*args)
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the agent is gone
            self._stop.set()

    def _watch_loop(self, rt: ResourceType, rv: int) -> None:
        while not self._stop.is_set():
            try:
                rv = self._watch_once(rt, rv)
            except _Expired:
                try:
                    items, rv = self._list(rt)
                except Exception as exc:
                    log.warning("localkube agent: listing %s failed: %s", rt.key, exc)
                    self._stop.wait(RETRY_SECONDS)
                    continue
                self._deliver(self.mirror.replace_all, rt, items, rv)
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("localkube agent: the watch of %s broke (%s); resuming", rt.key, exc)
                self._stop.wait(RETRY_SECONDS)

    def _watch_once(self, rt: ResourceType, rv: int) -> int:
        """One WATCH from `rv` until the server ends it; returns the last resourceVersion seen."""
        from kubernetes.watch.watch import iter_resp_lines

        query = {
            "watch": "true",
            "resourceVersion": str(rv),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        try:
            response = self.request("GET", api_path(rt, None), query=query, stream=True)
        except ApiError as exc:
            if exc.code == 410:
                raise _Expired from None
            raise
        with self._open_lock:
            self._open.add(response)
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired
                    raise ApiError(int(obj.get("code") or 500), obj.get("reason", ""), obj.get("message", ""))
                rv = max(rv, _rv(obj))
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._deliver(self.mirror.apply, event["type"], rt, obj)
        finally:
            with self._open_lock:
                self._open.discard(response)
            response.release_conn()
        return rv

    # -- reads: the mirror ---------------------------------------------------------------------------------
    def resource_type(self, group: str, version: str, plural: str) -> ResourceType:
        return self.mirror.resource_type(group, version, plural)

    def resource_types(self) -> list[ResourceType]:
        return self.mirror.resource_types()

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict:
        return self.mirror.get(rt, namespace, name)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Items:
        return self.mirror.list(rt, namespace, label_selector, field_selector)

    def add_index(self, rt: ResourceType, index: str, key: IndexKey) -> None:
        self.mirror.add_index(rt, index, key)

    def by_index(self, rt: ResourceType, index: str, key: Hashable, limit: int | None = None) -> Items:
        return self.mirror.by_index(rt, index, key, limit)

    def index_count(self, rt: ResourceType, index: str, key: Hashable) -> int:
        return self.mirror.index_count(rt, index, key)

    def subscribe(self, rt: ResourceType | None = None, namespace: str | None = None) -> Subscription:
        return self.mirror.subscribe(rt, namespace)

    # -- writes: the server, then the mirror ---------------------------------------------------------------
    def _applied(self, rt: ResourceType, obj: dict) -> dict:
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        self.mirror.apply("MODIFIED", rt, obj)
        return obj

    def create(self, rt: ResourceType, namespace: str, obj: dict) -> dict:
        return self._applied(rt, self.request("POST", api_path(rt, namespace), body=obj))

    def replace(
        self, rt: ResourceType, namespace: str, name: str, obj: dict, subresource: str | None = None
    ) -> dict:
        return self._applied(rt, self.request("PUT", api_path(rt, namespace, name, subresource), body=obj))

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None = None,
    ) -> dict:
        if isinstance(body, (bytes, str)):
            body = json.loads(body)
        path = api_path(rt, namespace, name, subresource)
        return self._applied(rt, self.request("PATCH", path, body=body, content_type=content_type))

    def update_status(self, rt: ResourceType, namespace: str, name: str, status: dict) -> dict:
        """A JSON patch that sets `.status` whole, with no resourceVersion: unconditional, as in-process."""
        patch = [{"op": "add", "path": "/status", "value": status}]
        return self.patch(rt, namespace, name, patch, JSON_PATCH, "status" if rt.has_status else None)

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        answer = self.request("DELETE", api_path(rt, namespace, name), body=options)
        if answer.get("kind") == "Status":  # some deletes answer a Status, not the object
            try:
                answer = self.mirror.get(rt, namespace, name)
            except ApiError:
                return answer
            self.mirror.apply("DELETED", rt, answer)
            return answer
        if (answer.get("metadata") or {}).get("deletionTimestamp"):
            return self._applied(rt, answer)  # kept for its finalizers (or, on a real server, a grace period)
        self.mirror.apply("DELETED", rt, answer)
        return answer

    def bind_pod(self, namespace: str, name: str, node: str, *, unbound_only: bool = False) -> dict:
        """POST pods/{name}/binding, as a scheduler binds (409 if the pod is bound already), then the pod."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", api_path(PODS, namespace, name, "binding"), body=binding)
        return self._applied(PODS, self.request("GET", api_path(PODS, namespace, name)))

"""The object store: metadata as a real API server sets it, patches, owner GC, finalizers and watch history.

Thread-safe (one lock); every method returns deep copies. Watchers (`subscribe`, `watch`) must live on an
asyncio loop; changes made from any thread reach them through `loop.call_soon_threadsafe`, in order.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from localkube.copying import clone
from localkube.defaults import apply_on_write, require_containers
from localkube.errors import ApiError, check_name
from localkube.patches import (
    STRATEGIC,
    UNSUPPORTED_PATCH_MSG,
    apply_patch,
    merge_patch,
    parse_patch_body,
)
from localkube.resources import (
    NAMESPACES,
    PODS,
    SERVICE_ACCOUNTS,
    ResourceType,
    default_resource_types,
    has_generation,
)
from localkube.selectors import SelectorError, compile_selectors
from localkube.subscriptions import Subscription, WatchEvent

__all__ = ["ApiError", "Store", "Subscription", "WatchEvent", "merge_patch", "now_rfc3339"]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_FIELDS = (
    "uid",
    "creationTimestamp",
    "generation",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "namespace",
    "name",
)
# The namespaces a new cluster has; the first three the NamespaceLifecycle admission never lets go.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = frozenset(SYSTEM_NAMESPACES[:3])
EXPIRED_CONTINUE_MSG = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def now_rfc3339(offset: float = 0.0) -> str:
    """Now (plus ``offset`` seconds) as the API server writes timestamps: RFC 3339, whole seconds, UTC."""
    return (datetime.now(UTC) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "start": list(start)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as exc:
        raise ApiError.bad_request(f"invalid continue token: continue key is not valid: {exc}") from exc


class Page(NamedTuple):
    """One page of a list: its items, the list's resourceVersion (a continued list keeps the first page's),
    the continue token of the next page and how many items follow (both None on the last page)."""

    items: list[dict]
    resource_version: str
    continue_token: str | None
    remaining: int | None


_Name = tuple[str, str]  # namespace ("" for cluster-scoped), name
Items = list[dict]
_Events = list[WatchEvent]
IndexKey = Callable[[dict], Hashable | None]  # an object's key in a secondary index; None leaves it out


def _gvp(rt: ResourceType) -> tuple[str, str, str]:
    return rt.group, rt.version, rt.plural


def _owner_uids(obj: dict) -> set[str]:
    return {ref["uid"] for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("uid")}


class _Secondary:
    """One named secondary index of one type: key -> names, each bucket in order of last write."""

    def __init__(self, key: IndexKey) -> None:
        self.key = key
        self.buckets: dict[Hashable, dict[_Name, None]] = {}

    def add(self, name: _Name, obj: dict) -> None:
        if (key := self.key(obj)) is not None:
            self.buckets.setdefault(key, {})[name] = None

    def remove(self, name: _Name, obj: dict) -> None:
        if (key := self.key(obj)) is not None and (bucket := self.buckets.get(key)) is not None:
            bucket.pop(name, None)
            if not bucket:
                del self.buckets[key]


class _Index:
    """Objects by type and name, by uid and by owner uid (for the garbage collector), plus the secondary
    indexes that `Store.add_index` registers."""

    def __init__(self) -> None:
        self.by_type: dict[tuple[str, str, str], dict[_Name, dict]] = {}
        self._by_uid: dict[str, tuple[ResourceType, _Name]] = {}
        self._children: dict[str, dict[tuple[tuple[str, str, str], _Name], ResourceType]] = {}
        self._secondary: dict[tuple[str, str, str], dict[str, _Secondary]] = {}

    @staticmethod
    def name_of(rt: ResourceType, obj: dict) -> _Name:
        return (obj["metadata"].get("namespace", "") if rt.namespaced else ""), obj["metadata"]["name"]

    def get(self, rt: ResourceType, name: _Name) -> dict | None:
        return self.by_type.get(_gvp(rt), {}).get(name)

    def put(self, rt: ResourceType, obj: dict) -> None:
        name = self.name_of(rt, obj)
        if (old := self.get(rt, name)) is not None:
            self._unindex(rt, old)
        self.by_type.setdefault(_gvp(rt), {})[name] = obj
        self._by_uid[obj["metadata"]["uid"]] = (rt, name)
        for owner in _owner_uids(obj):
            self._children.setdefault(owner, {})[(_gvp(rt), name)] = rt
        for secondary in self._secondary.get(_gvp(rt), {}).values():
            secondary.add(name, obj)

    def pop(self, rt: ResourceType, obj: dict) -> dict:
        previous = self.by_type[_gvp(rt)].pop(self.name_of(rt, obj))
        self._unindex(rt, previous)
        return previous

    def _unindex(self, rt: ResourceType, obj: dict) -> None:
        self._by_uid.pop(obj["metadata"]["uid"], None)
        for secondary in self._secondary.get(_gvp(rt), {}).values():
            secondary.remove(self.name_of(rt, obj), obj)
        for owner in _owner_uids(obj):
            children = self._children.get(owner, {})
            children.pop((_gvp(rt), self.name_of(rt, obj)), None)
            if not children:
                self._children.pop(owner, None)

    def add_secondary(self, rt: ResourceType, index: str, key: IndexKey) -> None:
        indexes = self._secondary.setdefault(_gvp(rt), {})
        if index not in indexes:
            indexes[index] = secondary = _Secondary(key)
            for name, obj in self.by_type.get(_gvp(rt), {}).items():
                secondary.add(name, obj)

    def secondary(self, rt: ResourceType, index: str, key: Hashable) -> dict[_Name, None]:
        """The names filed under `key`, least recently written first."""
        try:
            return self._secondary[_gvp(rt)][index].buckets.get(key, {})
        except KeyError:
            raise KeyError(f"no index {index!r} on {rt.key}") from None

    def find_uid(self, uid: str | None) -> tuple[ResourceType, dict] | None:
        found = self._by_uid.get(uid or "")
        return (found[0], self.by_type[_gvp(found[0])][found[1]]) if found else None

    def dependents(self, uid: str) -> list[tuple[ResourceType, dict]]:
        return [
            (rt, self.by_type[gvp][name]) for (gvp, name), rt in list(self._children.get(uid, {}).items())
        ]


class Store:
    """Objects of every registered resource type, one cluster-wide resourceVersion counter."""

    def __init__(
        self,
        resource_types: list[ResourceType] | None = None,
        *,
        history_size: int = 1000,
        validator: Callable[[ResourceType, dict], dict] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._objects = _Index()
        self._rv = 0
        self._history: deque[WatchEvent] = deque()
        self.history_size = history_size
        self._floor = 0  # resourceVersion of the newest change dropped from the history
        self._subs: list[Subscription] = []
        self.validator = validator
        # Seconds the server's clock is ahead of this machine's (negative: behind), where clients compare it
        # with theirs: metadata.creationTimestamp, the Date header of every answer and the timestamps of log
        # lines (LocalKube's PodLogs). Status times written by the controllers and the kubelet stay on this
        # machine's clock.
        self.clock_offset = 0.0
        for rt in default_resource_types() if resource_types is None else resource_types:
            self.register(rt)

    # -- types ---------------------------------------------------------------------------------------------
    def register(self, rt: ResourceType) -> None:
        """Serve `rt`; serving namespaces creates the ones every cluster has (`SYSTEM_NAMESPACES`)."""
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt
            for name in SYSTEM_NAMESPACES if rt == NAMESPACES else ():
                if self._objects.get(rt, ("", name)) is None:
                    self.create(rt, "", {"metadata": {"name": name}})
            if rt == SERVICE_ACCOUNTS:
                for (_, namespace), _ in list(self._iter(NAMESPACES, None)):
                    self._default_service_account(namespace)

    def _default_service_account(self, namespace: str) -> None:
        """What kube-controller-manager's service account controller makes in every namespace (at once
        here: a real cluster refuses a pod in a new namespace until it is there)."""
        if _gvp(SERVICE_ACCOUNTS) in self._types and not self._objects.get(
            SERVICE_ACCOUNTS, (namespace, "default")
        ):
            self.create(SERVICE_ACCOUNTS, namespace, {"metadata": {"name": "default"}})

    def resource_type(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self._types[(group, version, plural)]
        except KeyError:
            raise ApiError(
                404,
                "NotFound",
                "the server could not find the requested resource",
                {"group": group, "kind": plural},
            ) from None

    def resource_types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    # -- reads ---------------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> dict:
        with self._lock:
            return clone(self._raw(rt, namespace, name))

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Items:
        return self.list_page(rt, namespace, label_selector, field_selector)[0]

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Page:
        """A page of the list (the items as they are now: a continued list is no snapshot)."""
        predicate = self._predicate(rt, label_selector, field_selector)
        with self._lock:
            start: tuple[str, str] | None = None
            list_rv = self._rv
            if continue_token:
                list_rv, start = _decode_continue(continue_token)
                if list_rv < self._floor:
                    raise ApiError.expired(EXPIRED_CONTINUE_MSG)
            items = [
                obj
                for key, obj in sorted(self._iter(rt, namespace))
                if (start is None or key > start) and predicate(obj)
            ]
            if not limit or len(items) <= limit:
                return Page(clone(items), str(list_rv), None, None)
            page, last = items[:limit], items[limit - 1]["metadata"]
            token = _encode_continue(list_rv, (last.get("namespace", ""), last["name"]))
            return Page(clone(page), str(list_rv), token, len(items) - limit)

    def _predicate(
        self, rt: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> Callable[[dict], bool]:
        try:
            return compile_selectors(rt, label_selector, field_selector)
        except SelectorError as exc:
            raise ApiError.bad_request(str(exc)) from exc

    def _iter(self, rt: ResourceType, namespace: str | None) -> Iterator[tuple[tuple[str, str], dict]]:
        for name, obj in self._objects.by_type.get(_gvp(rt), {}).items():
            if namespace in (None, name[0]):
                yield name, obj

    def _raw(self, rt: ResourceType, namespace: str, name: str) -> dict:
        obj = self._objects.get(rt, (namespace if rt.namespaced else "", name))
        if obj is None:
            raise ApiError.not_found(rt, name)
        return obj

    # -- secondary indexes ---------------------------------------------------------------------------------
    def add_index(self, rt: ResourceType, index: str, key: IndexKey) -> None:
        """Index objects of `rt` by `key(obj)` under the name `index`; a second call with the name is a no-op.

        Every write and delete keeps the index current, so lookups never scan the type."""
        with self._lock:
            self._objects.add_secondary(rt, index, key)

    def by_index(self, rt: ResourceType, index: str, key: Hashable, limit: int | None = None) -> Items:
        """The objects whose key is `key`, least recently written first (at most `limit`); KeyError for an
        index never added."""
        with self._lock:
            names = itertools.islice(self._objects.secondary(rt, index, key), limit)
            return [clone(self._objects.by_type[_gvp(rt)][name]) for name in names]

    def index_count(self, rt: ResourceType, index: str, key: Hashable) -> int:
        with self._lock:
            return len(self._objects.secondary(rt, index, key))

    # -- writes --------------------------------------------------------------------------------------------
    def create(self, rt: ResourceType, namespace: str, obj: dict) -> dict:
        """Create, admitted as by the real server (also for controllers, which write here directly): 404 for
        a namespace that does not exist, 422 for a pod (or pod template) without containers."""
        obj = clone(obj)
        self._check_namespace(rt, namespace)
        require_containers(rt, obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise ApiError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                suffix = "".join(random.choices(_GENERATE_ALPHABET, k=5))
                meta["name"] = str(meta["generateName"])[:58] + suffix
            check_name(rt, meta.get("name"))
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_field, None)
            if rt.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(self.clock_offset), generation=1)
            if not has_generation(rt):
                del meta["generation"]
            if rt.has_status:
                obj["status"] = {}
                if not rt.builtin:
                    obj.pop("status")
            obj = self._validate(rt, apply_on_write(rt, obj, creating=True))
            if self._objects.get(rt, _Index.name_of(rt, obj)) is not None:
                name = obj["metadata"]["name"]
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{rt.key} "{name}" already exists',
                    {"name": name, "group": rt.group, "kind": rt.plural},
                )
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._objects.put(rt, obj)
            self._publish("ADDED", rt, obj)
            if rt == NAMESPACES:
                self._default_service_account(obj["metadata"]["name"])
            return clone(obj)

    def _check_namespace(self, rt: ResourceType, namespace: str) -> None:
        """The NamespaceLifecycle admission: objects go only into namespaces that exist (when served)."""
        with self._lock:
            served = _gvp(NAMESPACES) in self._types
            if rt.namespaced and served and self._objects.get(NAMESPACES, ("", namespace)) is None:
                raise ApiError.not_found(NAMESPACES, namespace)

    def _validate(self, rt: ResourceType, obj: dict) -> dict:
        return self.validator(rt, obj) if self.validator else obj

    def replace(
        self, rt: ResourceType, namespace: str, name: str, obj: dict, subresource: str | None = None
    ) -> dict:
        with self._lock:
            current = self._raw(rt, namespace, name)
            body_name = (obj.get("metadata") or {}).get("name")
            if body_name not in (None, name):
                raise ApiError.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                )
            self._check_rv(rt, current, (obj.get("metadata") or {}).get("resourceVersion"))
            return self._commit(rt, current, self._updated(rt, current, obj, subresource))

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None = None,
    ) -> dict:
        media = content_type.split(";")[0].strip().lower()
        if media == STRATEGIC and not rt.builtin:
            raise ApiError(415, "UnsupportedMediaType", UNSUPPORTED_PATCH_MSG)
        patch = parse_patch_body(body, media)
        with self._lock:
            missing = self._objects.get(rt, (namespace if rt.namespaced else "", name)) is None
            if media == "application/apply-patch+yaml" and missing:
                return self.create(rt, namespace, merge_patch({"metadata": {"name": name}}, patch))
            current = self._raw(rt, namespace, name)
            patched = apply_patch(current, patch, media)
            self._check_rv(rt, current, (patched.get("metadata") or {}).get("resourceVersion"))
            return self._commit(rt, current, self._updated(rt, current, patched, subresource))

    def bind_pod(self, namespace: str, name: str, node: str, *, unbound_only: bool = False) -> dict:
        """The scheduler's binding: set the pod's `spec.nodeName`. `unbound_only`: 409 Conflict for a pod
        assigned already, as POST pods/{name}/binding answers."""
        with self._lock:
            assigned = (self._raw(PODS, namespace, name).get("spec") or {}).get("nodeName")
            if unbound_only and assigned:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                    f'to node "{assigned}"',
                    {"name": name, "kind": "pods/binding"},
                )
            return self.patch(
                PODS, namespace, name, {"spec": {"nodeName": node}}, "application/merge-patch+json"
            )

    def update_status(self, rt: ResourceType, namespace: str, name: str, status: dict) -> dict:
        """Controller helper: write `.status` unconditionally (no resourceVersion check, no schema)."""
        with self._lock:
            current = self._raw(rt, namespace, name)
            new = clone(current)
            new["status"] = clone(status)
            return self._commit(rt, current, new, validate=False)

    def _check_rv(self, rt: ResourceType, current: dict, rv: Any) -> None:
        if rv and str(rv) != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "group": rt.group, "kind": rt.plural},
            )

    @staticmethod
    def _updated(rt: ResourceType, current: dict, body: dict, subresource: str | None) -> dict:
        """The object a write produces: /status changes only status, the main endpoint everything else."""
        if subresource == "status":
            new = clone(current)
            if body.get("status") is None:
                new.pop("status", None)
            else:
                new["status"] = clone(body["status"])
            return new
        new = clone(body)
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError.bad_request("metadata must be an object")
        for server_field in _SERVER_FIELDS:
            if server_field in current["metadata"]:
                meta[server_field] = current["metadata"][server_field]
            else:
                meta.pop(server_field, None)
        if rt.has_status:
            if "status" in current:
                new["status"] = clone(current["status"])
            else:
                new.pop("status", None)
        return new

    def _commit(self, rt: ResourceType, current: dict, new: dict, *, validate: bool = True) -> dict:
        new = apply_on_write(rt, new, creating=False)
        if validate:
            require_containers(rt, new)
            new = self._validate(rt, new)
        if new == current:
            return clone(current)
        if has_generation(rt) and _spec_of(rt, new) != _spec_of(rt, current):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rt, new)
        meta["resourceVersion"] = self._next_rv()
        self._objects.put(rt, new)
        self._publish("MODIFIED", rt, new, current)
        return clone(new)

    # -- delete and garbage collection ---------------------------------------------------------------------
    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict:
        """Delete (DeleteOptions `preconditions` `uid`/`resourceVersion` checked atomically: 409 Conflict).
        localkube has no graceful deletion: every delete is immediate, as with `grace_period_seconds=0`."""
        policy = propagation_policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError.bad_request(f'propagationPolicy: Unsupported value: "{policy}"')
        with self._lock:
            current = self._raw(rt, namespace, name)
            _check_preconditions(rt, current, preconditions or {})
            if rt == NAMESPACES and name in IMMORTAL_NAMESPACES:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                    {"name": name, "kind": "namespaces"},
                )
            return clone(self._delete(rt, current, policy))

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: str | None = None,
    ) -> Items:
        with self._lock:
            return [
                self.delete(
                    rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], propagation_policy
                )
                for obj in self.list(rt, namespace, label_selector, field_selector)
            ]

    def _delete(self, rt: ResourceType, obj: dict, policy: str) -> dict:
        uid = obj["metadata"]["uid"]
        if policy == "Orphan":
            for dep_rt, dep in self._objects.dependents(uid):
                refs = [ref for ref in dep["metadata"]["ownerReferences"] if ref.get("uid") != uid]
                self._commit(
                    dep_rt,
                    dep,
                    merge_patch(dep, {"metadata": {"ownerReferences": refs or None}}),
                    validate=False,
                )
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if (
            policy == "Foreground"
            and self._objects.dependents(uid)
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        if not finalizers:
            return self._remove(rt, obj)
        if not obj["metadata"].get("deletionTimestamp") or finalizers != obj["metadata"].get("finalizers"):
            marked = merge_patch(
                obj,
                {
                    "metadata": {
                        "finalizers": finalizers,
                        "deletionGracePeriodSeconds": 0,
                        "deletionTimestamp": obj["metadata"].get("deletionTimestamp") or now_rfc3339(),
                    }
                },
            )
            obj = self._commit(rt, obj, marked, validate=False)
        if policy == "Foreground":
            for dep_rt, dep in self._objects.dependents(uid):
                self._delete(dep_rt, dep, "Foreground")
        return obj

    def _remove(self, rt: ResourceType, obj: dict) -> dict:
        meta = obj["metadata"]
        previous = self._objects.pop(rt, obj)
        gone = clone(obj)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        if rt == NAMESPACES:  # as the namespace controller leaves it when it deletes it
            gone["metadata"].setdefault("deletionTimestamp", now_rfc3339())
            gone["status"] = {"phase": "Terminating"}
        self._publish("DELETED", rt, gone, previous)
        uid = meta["uid"]
        for dep_rt, dep in self._objects.dependents(uid):  # background garbage collection
            refs = [ref for ref in dep["metadata"]["ownerReferences"] if ref.get("uid") != uid]
            if any(self._objects.find_uid(ref.get("uid")) for ref in refs):
                self._commit(
                    dep_rt, dep, merge_patch(dep, {"metadata": {"ownerReferences": refs}}), validate=False
                )
            elif self._objects.get(dep_rt, _Index.name_of(dep_rt, dep)) is dep:
                self._delete(dep_rt, dep, "Background")
        for ref in meta.get("ownerReferences") or []:
            self._finish_foreground(ref.get("uid"))
        if rt == NAMESPACES:
            self._empty_namespace(meta["name"])
        return gone

    def _empty_namespace(self, namespace: str) -> None:
        """What the namespace controller does for a deleted namespace, at once: delete all that is in it."""
        for rt in list(self._types.values()):
            if rt.namespaced:
                for _, obj in list(self._iter(rt, namespace)):
                    if self._objects.get(rt, _Index.name_of(rt, obj)) is obj:  # not gone with an owner
                        self._delete(rt, obj, "Background")

    def _finish_foreground(self, owner_uid: str | None) -> None:
        found = self._objects.find_uid(owner_uid)
        if not found:
            return
        owner_rt, owner = found
        finalizers = owner["metadata"].get("finalizers") or []
        if "foregroundDeletion" in finalizers and not self._objects.dependents(owner["metadata"]["uid"]):
            rest = [f for f in finalizers if f != "foregroundDeletion"]
            self._commit(
                owner_rt,
                owner,
                merge_patch(owner, {"metadata": {"finalizers": rest or None}}),
                validate=False,
            )

    # -- watch ---------------------------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _publish(self, type_: str, rt: ResourceType, obj: dict, old: dict | None = None) -> None:
        event = WatchEvent(type_, rt, clone(obj), clone(old) if old is not None else None)
        self._history.append(event)
        while len(self._history) > max(self.history_size, 1):
            self._floor = self._history.popleft().resource_version
        for sub in list(self._subs):
            sub._push(event)

    def subscribe(self, rt: ResourceType | None = None, namespace: str | None = None) -> Subscription:
        """Every change from now on (optionally of one type / namespace); call from the loop that consumes."""
        loop = asyncio.get_running_loop()
        with self._lock:
            sub = Subscription(self._unsubscribe, loop, rt, namespace, self._rv)
            self._subs.append(sub)
            return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def watch(
        self, rt: ResourceType, namespace: str | None = None, resource_version: str | None = None
    ) -> tuple[_Events, Subscription]:
        """Atomically: the events a watch starts with (synthetic ADDED, or history after the version) and a
        subscription for what follows. A version older than the retained history raises 410 Expired."""
        with self._lock:
            if resource_version in (None, "", "0"):
                initial = [
                    WatchEvent("ADDED", rt, clone(obj)) for _, obj in sorted(self._iter(rt, namespace))
                ]
            else:
                try:
                    since = int(str(resource_version))
                except ValueError:
                    raise ApiError.bad_request(
                        f'resourceVersion: Invalid value: "{resource_version}"'
                    ) from None
                if since < self._floor:
                    raise ApiError.expired(f"too old resource version: {since} ({self._floor})")
                initial = [
                    WatchEvent(ev.type, ev.rt, clone(ev.object), clone(ev.old))
                    for ev in self._history
                    if ev.resource_version > since
                    and ev.rt == rt
                    and namespace in (None, ev.object["metadata"].get("namespace"))
                ]
            return initial, self.subscribe(rt, namespace)


def _spec_of(rt: ResourceType, obj: dict) -> dict:
    """What generation tracks: everything but metadata, and status when it is a subresource."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (k == "status" and rt.has_status)}


def _check_preconditions(rt: ResourceType, current: dict, preconditions: dict) -> None:
    """What the real server answers when a delete's precondition does not hold."""
    meta = current["metadata"]
    for key, field_name in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        wanted = preconditions.get(key)
        if wanted and str(wanted) != meta[key]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.key} "{meta["name"]}": Precondition failed: '
                f"{field_name} in precondition: {wanted}, {field_name} in object meta: {meta[key]}",
                {"name": meta["name"], "group": rt.group, "kind": rt.plural},
            )

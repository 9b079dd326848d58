"""Core v1 Events as the kubelet and controllers record them, deduplicated with a count.

A real cluster keeps events for a TTL (an hour by default) after their last update, whatever happens to the
object they are about. localkube keeps them in memory instead, at most `MAX_EVENTS_PER_NAMESPACE` per
namespace: recording one more drops the events least recently recorded or bumped. Deleting the involved object
leaves its events alone, as on a real cluster.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

from localkube.resources import EVENTS
from localkube.store import ApiError, now_rfc3339

if TYPE_CHECKING:
    from localkube.api import ClusterApi

MAX_EVENTS_PER_NAMESPACE = 5000
_SAME_EVENT = "localkube/same-event"
_NAMESPACE = "localkube/namespace"


def _same_event_key(event: dict) -> Hashable:
    """What makes two events the same one: involved object (by uid), type, reason, message and source."""
    involved = event.get("involvedObject") or {}
    return (
        event["metadata"].get("namespace"),
        involved.get("uid"),
        involved.get("kind"),
        involved.get("name"),
        event.get("type"),
        event.get("reason"),
        event.get("message"),
        (event.get("source") or {}).get("component"),
    )


def _namespace_key(event: dict) -> Hashable:
    return event["metadata"].get("namespace")


def record_event(
    store: ClusterApi, involved: dict, type_: str, reason: str, message: str, component: str
) -> dict:
    """Create (or bump the count of) the Event about `involved` (a stored object) in its namespace.

    A repeat of the same (object, type, reason, message, component) increments `count` and `lastTimestamp`,
    as the client-go event correlator does. The lookup goes through an index the store keeps current on every
    write and delete (also of events written or deleted through the API), so it costs the same however many
    events the namespace holds.
    """
    store.add_index(EVENTS, _SAME_EVENT, _same_event_key)
    store.add_index(EVENTS, _NAMESPACE, _namespace_key)
    meta = involved.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    ref = {
        "kind": involved.get("kind"),
        "namespace": namespace,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "apiVersion": involved.get("apiVersion"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    key = (namespace, ref["uid"], ref["kind"], ref["name"], type_, reason, message, component)
    same = store.by_index(EVENTS, _SAME_EVENT, key)
    if same:
        existing = same[-1]  # the one bumped last
        existing["count"] = int(existing.get("count") or 1) + 1
        existing["lastTimestamp"] = now_rfc3339()
        existing["involvedObject"] = ref
        try:
            return store.replace(EVENTS, namespace, existing["metadata"]["name"], existing)
        except ApiError as error:  # a concurrent bump or delete of the same event: record a fresh one
            if error.code not in (404, 409):
                raise
    now = now_rfc3339()
    event = {
        "metadata": {"name": f"{ref['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": type_,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
        "eventTime": None,
    }
    created = store.create(EVENTS, namespace, event)
    _drop_oldest(store, namespace)
    return created


def _drop_oldest(store: ClusterApi, namespace: str) -> None:
    """Keep at most MAX_EVENTS_PER_NAMESPACE events in the namespace (the stand-in for the event TTL)."""
    excess = store.index_count(EVENTS, _NAMESPACE, namespace) - MAX_EVENTS_PER_NAMESPACE
    if excess <= 0:
        return
    for old in store.by_index(EVENTS, _NAMESPACE, namespace, limit=excess):
        try:
            store.delete(EVENTS, namespace, old["metadata"]["name"])
        except ApiError as error:  # deleted meanwhile
            if error.code != 404:
                raise

"""Core v1 Events as the kubelet and controllers record them, deduplicated with a count."""

from __future__ import annotations

import time

from airflow_provider_training.localkube.resources import EVENTS
from airflow_provider_training.localkube.store import ApiError, Store, now_rfc3339


def record_event(store: Store, involved: dict, type_: str, reason: str, message: str, component: str) -> dict:
    """Create (or bump the count of) the Event about `involved` (a stored object) in its namespace.

    A repeat of the same (object, type, reason, message, component) increments `count` and `lastTimestamp`,
    as the client-go event correlator does.
    """
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
    selector = (
        f"involvedObject.name={ref['name']},involvedObject.kind={ref['kind']},reason={reason},type={type_}"
    )
    for existing in store.list(EVENTS, namespace, field_selector=selector):
        same = (
            existing.get("message") == message
            and (existing.get("source") or {}).get("component") == component
            and existing["involvedObject"].get("uid") == ref["uid"]
        )
        if same:
            existing["count"] = int(existing.get("count") or 1) + 1
            existing["lastTimestamp"] = now_rfc3339()
            existing["involvedObject"] = ref
            try:
                return store.replace(EVENTS, namespace, existing["metadata"]["name"], existing)
            except ApiError as error:  # a concurrent bump of the same event: record a fresh one
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
    return store.create(EVENTS, namespace, event)

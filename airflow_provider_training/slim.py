"""What the watch hub keeps of a watched object, held in memory for as long as the object is watched.

A triggerer holds a job and its pods per deferred task, so every field kept costs that many times over. The
hub keeps what some reader of its objects reads (the kinds' status, pod and child functions, ``diagnostics``,
the log streamer, the hub's own index) and drops the rest, and shares repeated strings (:func:`compact`).
"""

from __future__ import annotations

import sys
from typing import Any

from airflow_provider_training.kinds.base import PODS, ResourceRef

# Of a pod's spec: the node, the restart policy and the container names (logs: which container to read).
_POD_SPEC_KEPT = ("nodeName", "restartPolicy")
_POD_CONTAINER_LISTS = ("initContainers", "containers")
# Of a pod's status: the phase, why it failed, its conditions (unschedulable) and its containers' states.
_POD_STATUS_KEPT = ("phase", "reason", "message", "conditions", "startTime")
_POD_CONTAINER_STATUSES = ("initContainerStatuses", "containerStatuses")
_CONTAINER_STATUS_KEPT = ("name", "state", "lastState", "restartCount", "ready", "started")
# Strings up to this long are interned: keys, label values, timestamps, states, names and uids repeat across
# the cached objects (each watch event is decoded afresh, keys included); longer ones rarely repeat.
_INTERN_MAX = 128
_intern = sys.intern


def trim(obj: dict[str, Any], resource: ResourceRef) -> dict[str, Any]:
    """``obj`` with only what readers of watched objects use, its strings shared (:func:`compact`).

    Never ``metadata.managedFields`` (server-side apply bookkeeping, often the largest part of an object) nor
    ``metadata.annotations`` (``kubectl.kubernetes.io/last-applied-configuration`` alone is the whole
    manifest): no reader looks at either. Of a job or a status child, the pod templates in its spec (no kind
    reads them: replica counts, run policies and the like stay). Of a pod, its metadata but those two, the
    node, restart policy and container names of its spec, and of its status the phase, reason, message,
    conditions, start time and each container's name, state, last state, restart count and readiness (not
    images, IPs, QoS class): some 40 % of a pod in localkube, more on a real cluster."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        metadata.pop("annotations", None)
    spec = obj.get("spec")
    if resource == PODS:
        if isinstance(spec, dict):
            obj["spec"] = _pod_spec(spec)
        status = obj.get("status")
        if isinstance(status, dict):
            obj["status"] = _pod_status(status)
    elif isinstance(spec, dict):
        _drop_templates(spec)
    return compact(obj)


def _pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {key: spec[key] for key in _POD_SPEC_KEPT if key in spec}
    for key in _POD_CONTAINER_LISTS:
        if key in spec:
            kept[key] = [{"name": c.get("name")} for c in spec[key] or [] if isinstance(c, dict)]
    return kept


def _pod_status(status: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {key: status[key] for key in _POD_STATUS_KEPT if key in status}
    for key in _POD_CONTAINER_STATUSES:
        if key in status:
            kept[key] = [
                {k: cs[k] for k in _CONTAINER_STATUS_KEPT if k in cs}
                for cs in status[key] or []
                if isinstance(cs, dict)
            ]
    return kept


def _drop_templates(node: Any) -> None:
    """Remove every pod template (a mapping under a ``template`` key) below a job's or child's spec."""
    if isinstance(node, dict):
        if isinstance(node.get("template"), dict):
            del node["template"]
        for value in node.values():
            _drop_templates(value)
    elif isinstance(node, list):
        for value in node:
            _drop_templates(value)


def compact(value: Any) -> Any:
    """``value`` rebuilt with its keys and short strings interned: one copy of each across every cached
    object (interned strings are freed with their last reference). It runs for every watch event, so a
    mapping's leaves are handled inline, without a call each (a third to a half less CPU than a call per
    value)."""
    kind = type(value)
    if kind is dict:
        return _compact_dict(value)
    if kind is list:
        return [compact(item) for item in value]
    if kind is str and len(value) <= _INTERN_MAX:
        return _intern(value)
    return value


def _compact_dict(mapping: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in mapping.items():
        kind = type(value)
        if kind is str:
            if len(value) <= _INTERN_MAX:
                value = _intern(value)
        elif kind is dict:
            value = _compact_dict(value)
        elif kind is list:
            value = [compact(item) for item in value]
        out[_intern(key)] = value
    return out

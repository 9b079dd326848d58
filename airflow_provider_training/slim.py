"""What the watch hub keeps of a watched object, held in memory for as long as the object is watched.

A triggerer holds a job and its pods per deferred task, so every field kept costs that many times over. The
hub keeps what some reader of its objects reads (the kinds' status, pod and child functions, ``diagnostics``,
the log streamer, the hub's own index) and drops the rest; then it shares repeated strings (:func:`compact`),
and keeps each object packed (:class:`Packed`), not as dicts: decoded for a reader when it asks.
"""

from __future__ import annotations

import marshal
import sys
import zlib
from collections.abc import Mapping
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


# Each packed object is deflated against a preset dictionary: the first object packed of its family (a
# resource, or an apiVersion and kind), kept for the life of the process. Objects of one resource share most
# of their bytes (keys, label keys and values, owner references, condition types, timestamps), so a localkube
# pod of 1.0-1.2 KB deflates to 100-270 B and a job of 950 B to 90 B, where deflate alone halves them
# (``benchmarks/README.md``, "scale.py"). Raw deflate (no header or checksum: the bytes never leave the
# process), level 1: 25 us to pack, 2-5 us more to unpack.
_DICTIONARIES: dict[str, bytes] = {}
_DICTIONARY_MAX = 32 * 1024  # deflate's window: a longer dictionary would be cut
_WBITS = -15  # raw deflate, a 32 KiB window
_LEVEL = 1


def _dictionary(family: str, data: bytes) -> bytes:
    """The preset dictionary of ``family``; ``data`` becomes it if the family has none yet."""
    found = _DICTIONARIES.get(family)
    if found is None:
        found = _DICTIONARIES.setdefault(family, data[:_DICTIONARY_MAX])
    return found


class Packed:
    """One watched object as the hub keeps it: its name, resourceVersion and labels (what the hub indexes and
    routes by) and the whole object ``marshal``-led and deflated, unpacked for a reader (:meth:`unpack`).

    ``family`` names what the object is one of (a ``ResourceRef.key``; by default its apiVersion and kind,
    which the items of a LIST may lack): objects of one family share a preset dictionary, so a trimmed
    localkube pod is kept in 100-270 B and a job in 90 B, against 2.7-3.7 KiB as dicts with shared strings.
    ``marshal``
    writes the strings :func:`compact` interned as interned, so :meth:`unpack` shares keys and short strings
    again. Only what JSON decodes to is packed (dicts, lists, strings, numbers, booleans, ``None``); the bytes
    never leave the process.
    """

    __slots__ = ("_data", "_dictionary", "_labels", "name", "resource_version")

    def __init__(self, obj: Mapping[str, Any], family: str = "") -> None:
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        self.name = str(metadata.get("name", ""))
        version = metadata.get("resourceVersion")
        self.resource_version: str | None = None if version is None else str(version)
        labels = metadata.get("labels")
        # key, value, key, value...: a flat tuple is a third of a dict of the same labels
        self._labels: tuple[str, ...] = (
            tuple(item for pair in labels.items() for item in pair) if isinstance(labels, dict) else ()
        )
        data = marshal.dumps(obj if isinstance(obj, dict) else dict(obj))
        self._dictionary = _dictionary(family or f"{obj.get('apiVersion')}/{obj.get('kind')}", data)
        deflate = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, zdict=self._dictionary)
        self._data = deflate.compress(data) + deflate.flush()

    @property
    def labels(self) -> dict[str, str]:
        """``metadata.labels`` (a new dict)."""
        flat = self._labels
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def label(self, key: str) -> str | None:
        """The value of one label (``None``: the object has no such label)."""
        flat = self._labels
        for i in range(0, len(flat), 2):
            if flat[i] == key:
                return flat[i + 1]
        return None

    def unpack(self) -> dict[str, Any]:
        """The object, as a new dict each call (a reader may change its copy)."""
        inflate = zlib.decompressobj(_WBITS, zdict=self._dictionary)
        obj: dict[str, Any] = marshal.loads(inflate.decompress(self._data))
        return obj

    @property
    def size(self) -> int:
        """Bytes of the packed object (without the record, its labels and its family's dictionary)."""
        return len(self._data)

    def __repr__(self) -> str:
        return f"Packed({self.name!r}, resourceVersion={self.resource_version!r}, {len(self._data)} B)"

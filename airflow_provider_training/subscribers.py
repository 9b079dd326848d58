"""The watch hub's subscribers: what each is handed, and the index that finds the ones a change concerns.

A subscriber follows one object by name, or the objects matching some label selectors; it is primed with
the current state, then offered each change of a watched object that concerns it. :class:`Index` finds those
subscribers by the object's name and labels, so a change costs its own subscribers, not every one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_training.kinds.selectors import LabelTerm, labels_satisfy

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True)
class WatchEvent:
    """One change as a subscriber sees it: ``ADDED``, ``MODIFIED`` or ``DELETED`` and the object, trimmed
    (:func:`~airflow_provider_training.slim.trim`). The object is the hub's own, shared by every subscriber:
    read it, do not change it."""

    type: str
    object: dict[str, Any]

    @property
    def name(self) -> str:
        return object_name(self.object)

    def __repr__(self) -> str:
        return f"WatchEvent({self.type!r}, {self.name!r})"


# Called with each event of a subscription, or the error that ended it, on the hub's watch task: it must
# not block or raise (put it in a queue).
Deliver = Callable[["WatchEvent | BaseException"], None]


class Subscriber:
    """One subscription: events for one object name, or for objects matching any of some label selectors
    (none: every object), handed to ``put``.

    Until it is primed with the current state, changes are ignored (the priming snapshot includes them) or,
    while a named object's absence is being confirmed by a GET, buffered and replayed after it.
    """

    def __init__(
        self, name: str | None, selectors: list[tuple[LabelTerm, ...]] | None, deliver: Deliver
    ) -> None:
        self.name = name
        self.selectors = selectors
        self.put = deliver
        self.primed = False
        self.buffer: list[tuple[str, dict[str, Any]]] | None = None  # changes seen while confirming
        self.floor: str | None = None  # the resourceVersion the first event showed; older changes are stale
        self.matching: set[str] = set()  # for selector subscribers: the names it currently sees
        self.confirming: asyncio.Task[None] | None = None

    @property
    def terms(self) -> list[tuple[str, tuple[str, ...]]] | None:
        """(label key, values) per selector, one of its terms an object must carry to match (``None``: a named
        subscriber, or some selector has no such term, so every change is offered to this subscriber)."""
        return index_terms(self.selectors) if self.name is None else None

    def prime(self, objects: Iterable[dict[str, Any]]) -> None:
        """Deliver the cached state: the named object, or every matching one among ``objects``."""
        self.primed = True
        for obj in objects:
            if self.name is not None:
                self.put(WatchEvent(ADDED, obj))
            else:
                self.offer(ADDED, obj)

    def prime_confirmed(self, obj: dict[str, Any] | None, namespace: str) -> None:
        """Deliver what a GET found (``None``: a DELETED marker), then the changes seen meanwhile."""
        if obj is None:
            self.put(WatchEvent(DELETED, {"metadata": {"name": self.name, "namespace": namespace}}))
        else:
            self.put(WatchEvent(ADDED, obj))
            self.floor = object_version(obj)
        self.primed = True
        buffered, self.buffer = self.buffer or [], None
        for type_, changed in buffered:
            self.offer(type_, changed)

    def offer(self, type_: str, obj: dict[str, Any]) -> None:
        """Deliver one change if it concerns this subscriber."""
        if self.buffer is not None:
            self.buffer.append((type_, obj))
            return
        if not self.primed:
            return  # the priming snapshot, taken later, already includes this change
        name = object_name(obj)
        if self.name is not None:
            if name == self.name and not not_newer(object_version(obj), self.floor):
                self.put(WatchEvent(type_, obj))
            return
        if type_ != DELETED and self.selects(obj):
            seen = name in self.matching
            self.matching.add(name)
            self.put(WatchEvent(MODIFIED if seen else ADDED, obj))
        elif name in self.matching:
            self.matching.discard(name)
            self.put(WatchEvent(DELETED, obj))

    def selects(self, obj: dict[str, Any]) -> bool:
        if self.selectors is None:
            return True
        labels = object_labels(obj)
        return any(labels_satisfy(terms, labels) for terms in self.selectors)


def index_terms(selectors: list[tuple[LabelTerm, ...]] | None) -> list[tuple[str, tuple[str, ...]]] | None:
    """For each selector its first ``key=value`` or ``key in (...)`` term; ``None`` if one has none."""
    if selectors is None:
        return None
    terms = []
    for selector in selectors:
        term = next((t for t in selector if t.among and t.values is not None), None)
        if term is None or term.values is None:
            return None
        terms.append((term.key, term.values))
    return terms


class Index:
    """Which subscribers an object's change concerns, and which cached objects a new subscriber sees.

    Subscribers are found by the object's name, by the values of the label keys their selectors require,
    or (selectors without such a term) always; cached object names by those label values. An event thus
    costs its own subscribers, not all of them, and a new subscription replays its own objects only.
    """

    def __init__(self) -> None:
        self.named: dict[str, list[Subscriber]] = {}
        self.labelled: dict[str, dict[str, list[Subscriber]]] = {}  # label key -> value -> subscribers
        self.always: list[Subscriber] = []
        self.objects_by: dict[str, dict[str, dict[str, None]]] = {}  # label key -> value -> names (ordered)

    def add(self, sub: Subscriber, objects: dict[str, dict[str, Any]]) -> None:
        terms = sub.terms
        if sub.name is not None:
            self.named.setdefault(sub.name, []).append(sub)
        elif terms is None:
            self.always.append(sub)
        else:
            for key, values in terms:
                if key not in self.labelled:
                    self.labelled[key] = {}
                    self.objects_by[key] = {}
                    for obj in objects.values():
                        self._index_object(key, obj)
                for value in values:
                    self.labelled[key].setdefault(value, []).append(sub)

    def remove(self, sub: Subscriber) -> None:
        terms = sub.terms
        if sub.name is not None:
            discard(self.named, sub.name, sub)
        elif terms is None:
            self.always.remove(sub)
        else:
            for key, values in terms:
                for value in values:
                    discard(self.labelled[key], value, sub)

    def reset(self, objects: dict[str, dict[str, Any]]) -> None:
        """Index a new set of cached objects (the first LIST)."""
        for key in self.objects_by:
            self.objects_by[key] = {}
            for obj in objects.values():
                self._index_object(key, obj)

    def update(self, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """One cached object replaced (``None``: absent)."""
        for key, names in self.objects_by.items():
            if before is not None and (value := object_labels(before).get(key)) is not None:
                discard(names, value, object_name(before))
            if after is not None:
                self._index_object(key, after)

    def _index_object(self, key: str, obj: dict[str, Any]) -> None:
        if (value := object_labels(obj).get(key)) is not None:
            self.objects_by[key].setdefault(value, {})[object_name(obj)] = None

    def subscribers(self, *versions: dict[str, Any] | None) -> list[Subscriber]:
        """The subscribers a change between these versions of one object concerns: by its name, and by
        the labels of each version (the old one's reach the subscribers that saw it match, to learn it no
        longer does)."""
        found: dict[int, Subscriber] = {}
        for obj in versions:
            if obj is None:
                continue
            for sub in self.named.get(object_name(obj), ()):
                found[id(sub)] = sub
            labels = object_labels(obj)
            for key, by_value in self.labelled.items():
                if (value := labels.get(key)) is not None:
                    for sub in by_value.get(value, ()):
                        found[id(sub)] = sub
        for sub in self.always:
            found[id(sub)] = sub
        return list(found.values())

    def objects_of(self, sub: Subscriber, objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The cached objects a selector subscriber may select (all for one without index terms)."""
        terms = sub.terms
        if terms is None:
            return list(objects.values())
        names: dict[str, None] = {}
        for key, values in terms:
            for value in values:
                names.update(self.objects_by[key].get(value, {}))
        return [objects[name] for name in names]


def discard(index: dict[str, Any], key: str, item: Any) -> None:
    """Remove ``item`` from the list or dict at ``index[key]``, and the key once it is empty."""
    members = index.get(key)
    if members is None:
        return
    if isinstance(members, dict):
        members.pop(item, None)
    elif item in members:
        members.remove(item)
    if not members:
        del index[key]


def object_name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def object_labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def object_version(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("resourceVersion")


def not_newer(version: str | None, floor: str | None) -> bool:
    """Whether a change at ``version`` is already reflected by a read at ``floor`` (etcd revisions)."""
    if version is None or floor is None:
        return False
    try:
        return int(version) <= int(floor)
    except ValueError:
        return False

"""The shared watch hub: one LIST+WATCH per (connection, resource, namespace, scope) per loop, fanned out.

Every trigger waiting on a job subscribes here instead of polling or watching on its own, so a triggerer with
N deferred tasks keeps one watch per resource, namespace and scope, whatever N is. A scope is a label selector
without a job name (a kind's :attr:`~airflow_provider_training.kinds.base.JobKind.pod_watch_selectors`, e.g.
``training.kubeflow.org/job-name``) sent to the server, so that the hub lists, watches and caches only the
pods of training jobs and not every pod of a shared namespace. The hub keeps the current objects
(from the LIST, then the WATCH events; trimmed and packed, :mod:`~airflow_provider_training.slim`, each
unpacked for a subscriber as it asks), resumes a watch that ended from the last resourceVersion it saw,
relists on 410 Expired (reporting what changed meanwhile as MODIFIED/DELETED), backs off on errors, and stops
the watch when its last subscriber leaves.

The watch is read raw (``watch=true`` answered as newline-delimited JSON) rather than through
``kubernetes_asyncio.watch.Watch``: that class retries a 410 from the same stale resourceVersion and builds a
default-configured ``ApiClient`` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import ResourceRef
from airflow_provider_training.kinds.selectors import LabelTerm, labels_satisfy, parse_selector
from airflow_provider_training.slim import Packed, trim

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
LIST_PAGE = 100
"""Objects per page of a shared watch's LIST. A page is decoded whole, and what the largest one took stays
with the process: CPython's allocator keeps each arena that a kept object still uses, so the memory a LIST
decoded at once (some 14 KB per localkube pod, before trimming) stayed as RSS after it was freed. In pages it
is bounded by the page: once what each job keeps was cut to some 12 KB, a page of 250 (3.5 MB at its peak)
was a fifth of what 1,000 jobs hold, and 100 is 1.4 MB, for 32 LIST requests at start-up instead of 14 at
1,000 jobs of two pods (``benchmarks/README.md``, "scale.py"). Kubernetes' own informers read pages of 500."""


class WatchEvent:
    """One change as a subscriber sees it: ``ADDED``, ``MODIFIED`` or ``DELETED`` and the object.

    ``packed`` is the same object as the hub keeps it (``None`` for a ``DELETED`` marker of an object that
    does not exist): a subscriber that holds on to the object keeps that, which costs nothing more, rather
    than the dict. ``object`` is the dict: a watch event's own (one for every subscriber of the change), or,
    for an event made from the cache (priming), unpacked from ``packed`` when first read. A triggerer that
    starts N waits primes some 3N objects in one step; unpacked there and then, they sat in the waiters'
    inboxes together, the start-up's memory peak, which the process kept as RSS."""

    __slots__ = ("_object", "packed", "type")

    def __init__(self, type: str, object: dict[str, Any] | None = None, packed: Packed | None = None) -> None:
        if object is None and packed is None:
            raise ValueError("a watch event needs its object, as a dict or packed")
        self.type, self._object, self.packed = type, object, packed

    @property
    def object(self) -> dict[str, Any]:
        if self._object is None:
            assert self.packed is not None
            self._object = self.packed.unpack()
        return self._object

    @property
    def name(self) -> str:
        return str(self.object.get("metadata", {}).get("name", ""))

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, WatchEvent):
            return NotImplemented
        return (self.type, self.object) == (other.type, other.object)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"WatchEvent({self.type!r}, {self.name!r})"


# Called with each event of a subscription, or the error that ended it, on the hub's watch task: it must
# not block or raise (put it in a queue).
Deliver = Callable[["WatchEvent | BaseException"], None]


@dataclass(frozen=True)
class HubStats:
    """Counters of a hub's API traffic, for benchmarks and tests."""

    watches_opened: int = 0  # watch requests sent (first connects and reconnects)
    lists: int = 0  # LIST calls (first lists and relists)
    relists: int = 0  # LISTs after a 410
    requests: int = 0  # every HTTP request the hub sent, retries included
    active_watches: int = 0  # shared watches running now
    subscribers: int = 0  # subscribers now
    events: int = 0  # watch events received from the server
    cached: int = 0  # objects the running watches hold now


class _Subscriber:
    """One subscription: a queue of events for one object name, or for objects matching any of some label
    selectors (none: every object).

    Until it is primed with the current state, changes are ignored (the priming snapshot includes them) or,
    while a named object's absence is being confirmed by a GET, buffered and replayed after it.
    """

    __slots__ = ("buffer", "confirming", "floor", "matching", "name", "primed", "put", "selectors")

    def __init__(
        self, name: str | None, selectors: list[tuple[LabelTerm, ...]] | None, deliver: Deliver
    ) -> None:
        self.name = name
        self.selectors = selectors
        self.put = deliver
        self.primed = False
        self.buffer: list[tuple[str, Packed, dict[str, Any] | None]] | None = None  # seen while confirming
        self.floor: str | None = None  # the resourceVersion the first event showed; older changes are stale
        # For selector subscribers: the names it currently sees (none for a named one: a set is 216 B).
        self.matching: set[str] = set() if name is None else _NO_NAMES
        self.confirming: asyncio.Task[None] | None = None

    @property
    def terms(self) -> list[tuple[str, tuple[str, ...]]] | None:
        """(label key, values) per selector, one of its terms an object must carry to match (``None``: a named
        subscriber, or some selector has no such term, so every change is offered to this subscriber). Read
        when the subscriber joins or leaves the index, not kept."""
        return _index_terms(self.selectors) if self.name is None else None

    def prime(self, objects: Iterable[Packed]) -> None:
        """Deliver the cached state: the named object, or every matching one among ``objects``."""
        self.primed = True
        for packed in objects:
            if self.name is not None:
                self.put(WatchEvent(ADDED, None, packed))
            else:
                self.offer(ADDED, packed)

    def prime_confirmed(self, packed: Packed | None, namespace: str) -> None:
        """Deliver what a GET found (``None``: a DELETED marker), then the changes seen meanwhile."""
        if packed is None:
            marker = {"metadata": {"name": self.name, "namespace": namespace}}
            self.put(WatchEvent(DELETED, marker))
        else:
            self.put(WatchEvent(ADDED, None, packed))
            self.floor = packed.resource_version
        self.primed = True
        buffered, self.buffer = self.buffer or [], None
        for type_, changed, obj in buffered:
            self.offer(type_, changed, obj)

    def offer(self, type_: str, packed: Packed, obj: dict[str, Any] | None = None) -> None:
        """Deliver one change if it concerns this subscriber: ``packed`` as cached, ``obj`` the same object
        as a dict when the caller has one (a watch event's: shared by every subscriber of the change),
        else unpacked for this one."""
        if self.buffer is not None:
            self.buffer.append((type_, packed, obj))
            return
        if not self.primed:
            return  # the priming snapshot, taken later, already includes this change
        name = packed.name
        if self.name is not None:
            if name == self.name and not _not_newer(packed.resource_version, self.floor):
                self.put(WatchEvent(type_, obj, packed))
            return
        selected = type_ != DELETED and self.selects(packed)
        if selected:
            seen = name in self.matching
            self.matching.add(name)
            self.put(WatchEvent(MODIFIED if seen else ADDED, obj, packed))
        elif name in self.matching:
            self.matching.discard(name)
            self.put(WatchEvent(DELETED, obj, packed))

    def selects(self, packed: Packed) -> bool:
        if self.selectors is None:
            return True
        labels = packed.labels
        return any(labels_satisfy(terms, labels) for terms in self.selectors)


_NO_NAMES: set[str] = set()  # a named subscriber's ``matching``: never added to (see ``offer``)


def _index_terms(selectors: list[tuple[LabelTerm, ...]] | None) -> list[tuple[str, tuple[str, ...]]] | None:
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


class _Index:
    """Which subscribers an object's change concerns, and which cached objects a new subscriber sees.

    Subscribers are found by the object's name, by the values of the label keys their selectors require,
    or (selectors without such a term) always; cached object names by those label values. An event thus
    costs its own subscribers, not all of them, and a new subscription replays its own objects only.
    """

    def __init__(self) -> None:
        self.named: dict[str, list[_Subscriber]] = {}
        self.labelled: dict[str, dict[str, list[_Subscriber]]] = {}  # label key -> value -> subscribers
        self.always: list[_Subscriber] = []
        self.objects_by: dict[str, dict[str, dict[str, None]]] = {}  # label key -> value -> names (ordered)

    def add(self, sub: _Subscriber, objects: dict[str, Packed]) -> None:
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

    def remove(self, sub: _Subscriber) -> None:
        terms = sub.terms
        if sub.name is not None:
            _discard(self.named, sub.name, sub)
        elif terms is None:
            self.always.remove(sub)
        else:
            for key, values in terms:
                for value in values:
                    _discard(self.labelled[key], value, sub)

    def reset(self, objects: dict[str, Packed]) -> None:
        """Index a new set of cached objects (the first LIST)."""
        for key in self.objects_by:
            self.objects_by[key] = {}
            for obj in objects.values():
                self._index_object(key, obj)

    def update(self, before: Packed | None, after: Packed | None) -> None:
        """One cached object replaced (``None``: absent)."""
        for key, names in self.objects_by.items():
            if before is not None and (value := before.label(key)) is not None:
                _discard(names, value, before.name)
            if after is not None:
                self._index_object(key, after)

    def _index_object(self, key: str, obj: Packed) -> None:
        if (value := obj.label(key)) is not None:
            self.objects_by[key].setdefault(value, {})[obj.name] = None

    def subscribers(self, *versions: Packed | None) -> list[_Subscriber]:
        """The subscribers a change between these versions of one object concerns: by its name, and by
        the labels of each version (the old one's reach the subscribers that saw it match, to learn it no
        longer does)."""
        found: dict[int, _Subscriber] = {}
        for obj in versions:
            if obj is None:
                continue
            for sub in self.named.get(obj.name, ()):
                found[id(sub)] = sub
            labels = obj.labels
            for key, by_value in self.labelled.items():
                if (value := labels.get(key)) is not None:
                    for sub in by_value.get(value, ()):
                        found[id(sub)] = sub
        for sub in self.always:
            found[id(sub)] = sub
        return list(found.values())

    def objects_of(self, sub: _Subscriber, objects: dict[str, Packed]) -> list[Packed]:
        """The cached objects a selector subscriber may select (all for one without index terms)."""
        terms = sub.terms
        if terms is None:
            return list(objects.values())
        names: dict[str, None] = {}
        for key, values in terms:
            for value in values:
                names.update(self.objects_by[key].get(value, {}))
        return [objects[name] for name in names]


def _discard(index: dict[str, Any], key: str, item: Any) -> None:
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


class _SharedWatch:
    """The LIST+WATCH loop of one (connection, resource, namespace, scope), with its own hook and client.

    ``scope`` is the label selector the server filters by (``""``: every object of the namespace)."""

    def __init__(
        self, hub: WatchHub, hook: AsyncTrainingJobHook, resource: ResourceRef, namespace: str, scope: str
    ):
        self.hub = hub
        self.hook = hook
        self.resource = resource
        self.namespace = namespace
        self.scope = scope
        self.objects: dict[str, Packed] = {}  # by name
        self.resource_version: str | None = None
        self.synced = False
        self.subscribers: list[_Subscriber] = []
        self.index = _Index()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"watch {self._label}")

    @property
    def _label(self) -> str:
        scoped = f" labelled {self.scope}" if self.scope else ""
        return f"{self.resource.key}{scoped} in {self.namespace}"

    def add(self, sub: _Subscriber) -> None:
        self.subscribers.append(sub)
        self.index.add(sub, self.objects)
        if self.synced:
            self._prime(sub)

    def remove(self, sub: _Subscriber) -> None:
        self.subscribers.remove(sub)
        self.index.remove(sub)

    def _prime(self, sub: _Subscriber) -> None:
        if sub.name is None:
            sub.prime(self.index.objects_of(sub, self.objects))
            return
        if sub.name in self.objects:
            sub.prime([self.objects[sub.name]])
            return
        # Absent from the cache: it may have been created a moment ago and its event not be here yet.
        sub.buffer = []
        sub.confirming = asyncio.get_running_loop().create_task(self._confirm(sub))

    async def _confirm(self, sub: _Subscriber) -> None:
        assert sub.name is not None
        try:
            obj = await self.hook.get_object(self.resource, sub.name, self.namespace)
        except Exception as err:
            sub.put(err)
            return
        packed = None if obj is None else Packed(trim(obj, self.resource), self.resource.key)
        sub.prime_confirmed(packed, self.namespace)

    async def stop(self) -> None:
        # asyncio.wait, not `await self.task`: awaiting the cancelled task would raise *its* CancelledError,
        # which carries no message, in place of the caller's own (the triggerer's "user action" cancellation,
        # without which Airflow never calls the trigger's on_kill).
        self.task.cancel()
        await asyncio.wait({self.task})

    async def _run(self) -> None:
        self.hub._count(active_watches=1)
        failures = 0
        try:
            while True:
                try:
                    if self.resource_version is None:
                        await self._list()
                    await self._watch()
                    failures = 0
                except KubeApiError as err:
                    if err.status == 410:
                        log.info("Watch of %s expired (%s); relisting", self._label, err)
                        self.resource_version = None
                        self.hub._count(relists=1)
                        continue
                    if not is_transient(err):
                        raise
                    failures += 1
                    await self._backoff(failures, err)
                except Exception as err:
                    if not is_transient(err):
                        raise
                    failures += 1
                    await self._backoff(failures, err)
        except Exception as err:
            log.warning("Watch of %s failed: %s", self._label, err)
            for sub in self.subscribers:
                sub.put(err)
        finally:
            self.hub._count(active_watches=-1, requests=self.hook.request_count)
            await self.hook.close()

    async def _backoff(self, failures: int, err: BaseException) -> None:
        policy = self.hook.retry
        delay = policy.delay(min(failures, 8), err)
        log.info("Watch of %s interrupted (%s); retrying in %.2fs", self._label, err, delay)
        await asyncio.sleep(delay)

    async def _list_pages(self) -> tuple[dict[str, Packed], str | None]:
        """Every object (trimmed and packed, by name) and the list's resourceVersion, read in pages of
        :data:`LIST_PAGE` (``limit``, then ``continue``; an expired continue token is a 410: relisted)."""
        current: dict[str, Packed] = {}
        version: str | None = None
        token: str | None = None
        while True:
            page = await self.hook.list_objects(
                self.resource,
                self.namespace,
                label_selector=self.scope or None,
                limit=LIST_PAGE,
                continue_token=token,
            )
            for packed in (
                Packed(trim(item, self.resource), self.resource.key) for item in page.get("items") or []
            ):
                current[packed.name] = packed
            metadata = page.get("metadata") or {}
            version = str(metadata.get("resourceVersion") or "") or version
            token = metadata.get("continue") or None
            del page  # its dicts go before the next page is read
            if token is None:
                return current, version

    async def _list(self) -> None:
        self.hub._count(lists=1)
        current, self.resource_version = await self._list_pages()
        if not self.synced:
            self.objects = current
            self.index.reset(current)
            self.synced = True
            for sub in self.subscribers:
                if sub.name is not None and sub.name not in current:
                    sub.prime_confirmed(None, self.namespace)  # the LIST was read just now: no GET needed
                else:
                    self._prime(sub)
            return
        # A relist: report what the expired watch missed.
        for name, gone in list(self.objects.items()):
            if name not in current:  # its last known state, marked as deleted by the time of the list
                last = gone.unpack()
                last["metadata"] = {**last.get("metadata", {}), "resourceVersion": self.resource_version}
                self._apply(DELETED, last)
        for name, packed in current.items():
            before = self.objects.get(name)
            if before is None:
                self._apply(ADDED, packed.unpack(), packed)
            elif before.resource_version != packed.resource_version:
                self._apply(MODIFIED, packed.unpack(), packed)

    async def _watch(self) -> None:
        self.hub._count(watches_opened=1)
        timeout = random.randint(*self.hub.watch_timeout)
        events = self.hook.watch_objects(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=timeout,
            label_selector=self.scope or None,
        )
        async for event in events:
            self.hub._count(events=1)
            obj = event.get("object") or {}
            version = _rv(obj)
            if event.get("type") != "BOOKMARK":
                self._apply(str(event.get("type")), trim(obj, self.resource))
            if version:
                self.resource_version = version

    def _apply(self, type_: str, obj: dict[str, Any], packed: Packed | None = None) -> None:
        """Keep one change (``obj``, trimmed; ``packed``: the same, if packed already) and offer it to the
        subscribers it concerns, each given the same ``obj``."""
        packed = Packed(obj, self.resource.key) if packed is None else packed
        name = packed.name
        before = self.objects.pop(name, None) if type_ == DELETED else self.objects.get(name)
        if type_ != DELETED:
            self.objects[name] = packed
        self.index.update(before, None if type_ == DELETED else packed)
        for sub in self.index.subscribers(before, packed):
            sub.offer(type_, packed, obj)


def _rv(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("resourceVersion")


def _not_newer(version: str | None, floor: str | None) -> bool:
    """Whether a change at ``version`` is already reflected by a read at ``floor`` (etcd revisions)."""
    if version is None or floor is None:
        return False
    try:
        return int(version) <= int(floor)
    except ValueError:
        return False


def _watch_key(hook: AsyncTrainingJobHook, resource: ResourceRef, namespace: str) -> Hashable:
    """What a watch is shared by, but for its scope."""
    return (hook.connection_key, resource.group, resource.version, resource.plural, namespace)


def serving_scope(selector: str, scope: Sequence[str]) -> str:
    """The first of the server-side selectors ``scope`` that holds every object ``selector`` selects (``""``:
    none does, so the namespace-wide watch serves it). Judged term by term: a scope term must follow from one
    of the selector's terms on the same key, so a scope is never chosen wrongly, only perhaps missed."""
    terms = parse_selector(selector)
    for candidate in scope:
        if candidate and all(any(_implies(t, wanted) for t in terms) for wanted in parse_selector(candidate)):
            return candidate
    return ""


def _implies(term: LabelTerm, wanted: LabelTerm) -> bool:
    """Whether every label set satisfying ``term`` satisfies ``wanted``."""
    if term.key != wanted.key:
        return False
    if wanted.among:  # ``key`` or ``key in (...)``: ``term`` must require the label, with values among these
        return term.among and (
            wanted.values is None or (term.values is not None and set(term.values) <= set(wanted.values))
        )
    if not term.among:  # ``!key`` or ``key notin (...)``, from ``!key`` or a wider ``notin``
        return term.values is None or (wanted.values is not None and set(wanted.values) <= set(term.values))
    return term.values is not None and wanted.values is not None and not set(term.values) & set(wanted.values)


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WatchHub] = weakref.WeakKeyDictionary()


class WatchHub:
    """Shares one LIST+WATCH per (connection, resource, namespace, scope) among the subscribers of an event
    loop."""

    def __init__(self, *, watch_timeout: tuple[int, int] = (240, 360)) -> None:
        # Server-side timeoutSeconds of each watch request, drawn from this range so reconnects spread out.
        self.watch_timeout = watch_timeout
        self._watches: dict[tuple[Hashable, str], _SharedWatch] = {}  # by watch key and scope
        self._keys: dict[Hashable, Hashable] = {}  # each watch key as first made (a few per triggerer)
        self._stats = HubStats()

    @classmethod
    def shared(cls) -> WatchHub:
        """The hub of the running event loop (one per triggerer loop)."""
        loop = asyncio.get_running_loop()
        hub = _hubs.get(loop)
        if hub is None:
            hub = _hubs[loop] = cls()
        return hub

    @property
    def stats(self) -> HubStats:
        running = [watch for watch in self._watches.values() if not watch.task.done()]
        live = sum(watch.hook.request_count for watch in running)
        cached = sum(len(watch.objects) for watch in running)
        return replace(self._stats, requests=self._stats.requests + live, cached=cached)

    def cached(
        self, hook: AsyncTrainingJobHook, resource: ResourceRef, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """An object as a running shared watch of its resource and namespace (of any scope) last saw it
        (``None``: no such watch, not listed yet, or no such object), unpacked: a new dict each call. Costs
        no request."""
        key = _watch_key(hook, resource, namespace)
        for (watched, _), watch in self._watches.items():
            if watched == key and watch.synced and name in watch.objects:
                return watch.objects[name].unpack()
        return None

    def _count(self, **deltas: int) -> None:
        self._stats = replace(self._stats, **{k: getattr(self._stats, k) + v for k, v in deltas.items()})

    @contextlib.asynccontextmanager
    async def subscribe(
        self,
        hook: AsyncTrainingJobHook,
        resource: ResourceRef,
        namespace: str,
        *,
        name: str | None = None,
        label_selector: str | Sequence[str] | None = None,
        scope: Sequence[str] = (),
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Events of one object (``name``), of the objects matching ``label_selector``, or of all.

        ``name`` works for any resource (a job, a batch Job or ReplicaSet it owns, a pod). Several label
        selectors select their union (each object once), for replicas whose types are labelled differently.

        ``scope`` lists server-side label selectors (a kind's ``pod_watch_selectors``): each label selector
        is served by the shared watch of the first of them that holds every object it selects
        (:func:`serving_scope`), so that watch lists only those objects; one no scope holds, and a named
        object, by the watch of the whole namespace. Union semantics hold within each scope: an object two
        scopes hold (labelled for both) would be reported by each.

        The first event for a named object is its current state (``ADDED``), or ``DELETED`` with just its name
        when it does not exist. A selector subscription starts with ``ADDED`` for every matching object, and
        sees an object that stops matching as ``DELETED``. A watch failure that retrying cannot fix (403, an
        unknown resource) is raised from the iterator.
        """
        queue: asyncio.Queue[WatchEvent | BaseException] = asyncio.Queue()
        async with self.feed(
            hook, resource, namespace, queue.put_nowait, name=name, label_selector=label_selector, scope=scope
        ):
            yield _events(queue)

    def feed(
        self,
        hook: AsyncTrainingJobHook,
        resource: ResourceRef,
        namespace: str,
        deliver: Deliver,
        *,
        name: str | None = None,
        label_selector: str | Sequence[str] | None = None,
        scope: Sequence[str] = (),
    ) -> Subscription:
        """The events of :meth:`subscribe`, each handed to ``deliver`` as it arrives (and the error that
        ended the watch, instead of raising it), until the subscription is closed (``async with``, or
        :meth:`Subscription.close`). For a subscriber that merges several subscriptions into a queue of its
        own: no queue, task or generator per subscription, so a waiting job costs little memory."""
        given = [label_selector] if isinstance(label_selector, str) else list(label_selector or ())
        # No selector, or an empty one among them, selects every object: the namespace-wide watch serves it.
        parts: dict[str, list[tuple[LabelTerm, ...]] | None] = {"": None}
        if name is None and given and all(given):
            grouped: dict[str, list[tuple[LabelTerm, ...]]] = {}
            for selector in given:
                grouped.setdefault(serving_scope(selector, scope), []).append(parse_selector(selector))
            parts = dict(grouped)
        key = _watch_key(hook, resource, namespace)
        key = self._keys.setdefault(key, key)  # one tuple per watched key, not one per subscription
        joined: list[tuple[_SharedWatch, _Subscriber]] = []
        for scoped, selectors in parts.items():
            watch = self._watches.get((key, scoped))
            if watch is None or watch.task.done():
                watch = self._watches[key, scoped] = _SharedWatch(
                    self, hook.copy(), resource, namespace, scoped
                )
            sub = _Subscriber(name, selectors, deliver)
            watch.add(sub)
            joined.append((watch, sub))
        self._count(subscribers=1)
        return Subscription(self, key, joined)

    async def _leave(self, key: Hashable, joined: list[tuple[_SharedWatch, _Subscriber]]) -> None:
        self._count(subscribers=-1)
        for watch, sub in joined:
            if sub.confirming is not None:
                sub.confirming.cancel()
            watch.remove(sub)
            if not watch.subscribers:
                if self._watches.get((key, watch.scope)) is watch:
                    del self._watches[key, watch.scope]
                await watch.stop()


class Subscription:
    """A :meth:`WatchHub.feed` subscription: delivering from the moment it is made until :meth:`close`, or
    for the body of an ``async with``."""

    __slots__ = ("_hub", "_joined", "_key")

    def __init__(self, hub: WatchHub, key: Hashable, joined: list[tuple[_SharedWatch, _Subscriber]]):
        self._hub, self._key, self._joined = hub, key, joined

    async def close(self) -> None:
        """Leave; the shared watches no subscriber is left on stop. Closing again does nothing."""
        joined, self._joined = self._joined, []
        if joined:
            await self._hub._leave(self._key, joined)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


async def _events(queue: asyncio.Queue[WatchEvent | BaseException]) -> AsyncIterator[WatchEvent]:
    while True:
        item = await queue.get()
        if isinstance(item, BaseException):
            raise item
        yield item

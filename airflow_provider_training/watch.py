"""The shared watch hub: one LIST+WATCH per (connection, resource, namespace, scope) per loop, fanned out.

Every trigger waiting on a job subscribes here instead of polling or watching on its own, so a triggerer with
N deferred tasks keeps one watch per resource, namespace and scope, whatever N is. A scope is a label selector
without a job name (a kind's :attr:`~airflow_provider_training.kinds.base.JobKind.pod_watch_selectors`, e.g.
``training.kubeflow.org/job-name``) sent to the server, so that the hub lists, watches and caches only the
pods of training jobs and not every pod of a shared namespace. The hub keeps the current objects
(from the LIST, then the WATCH events; trimmed to what readers read, :mod:`~airflow_provider_training.slim`,
and shared with every subscriber: read-only), resumes a watch that ended from the last resourceVersion it saw,
relists on 410 Expired (reporting what changed meanwhile as MODIFIED/DELETED), backs off on errors, and stops
the watch when its last subscriber leaves.

The watch is read raw (``watch=true`` answered as newline-delimited JSON) rather than through
``kubernetes_asyncio.watch.Watch``: that class retries a 410 from the same stale resourceVersion and builds a
default-configured ``ApiClient`` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import weakref
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import ResourceRef
from airflow_provider_training.kinds.selectors import LabelTerm, parse_selector
from airflow_provider_training.slim import trim
from airflow_provider_training.subscribers import (
    ADDED,
    DELETED,
    MODIFIED,
    Deliver,
    Index,
    Subscriber,
    WatchEvent,
    object_name,
    object_version,
)

log = logging.getLogger(__name__)

__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "HubStats",
    "Subscription",
    "WatchEvent",
    "WatchHub",
    "serving_scope",
]
LIST_PAGE = 100
"""Objects per page of a shared watch's LIST: what decoding a page takes is bounded by the page, not by the
namespace (Kubernetes' own informers read pages of 500)."""


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
        self.objects: dict[str, dict[str, Any]] = {}  # by name, trimmed
        self.resource_version: str | None = None
        self.synced = False
        self.subscribers: list[Subscriber] = []
        self.index = Index()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"watch {self._label}")

    @property
    def _label(self) -> str:
        scoped = f" labelled {self.scope}" if self.scope else ""
        return f"{self.resource.key}{scoped} in {self.namespace}"

    def add(self, sub: Subscriber) -> None:
        self.subscribers.append(sub)
        self.index.add(sub, self.objects)
        if self.synced:
            self._prime(sub)

    def remove(self, sub: Subscriber) -> None:
        self.subscribers.remove(sub)
        self.index.remove(sub)

    def _prime(self, sub: Subscriber) -> None:
        if sub.name is None:
            sub.prime(self.index.objects_of(sub, self.objects))
            return
        if sub.name in self.objects:
            sub.prime([self.objects[sub.name]])
            return
        # Absent from the cache: it may have been created a moment ago and its event not be here yet.
        sub.buffer = []
        sub.confirming = asyncio.get_running_loop().create_task(self._confirm(sub))

    async def _confirm(self, sub: Subscriber) -> None:
        assert sub.name is not None
        try:
            obj = await self.hook.get_object(self.resource, sub.name, self.namespace)
        except Exception as err:
            sub.put(err)
            return
        sub.prime_confirmed(None if obj is None else trim(obj, self.resource), self.namespace)

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

    async def _list_pages(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Every object (trimmed, by name) and the list's resourceVersion, read in pages of
        :data:`LIST_PAGE` (``limit``, then ``continue``; an expired continue token is a 410: relisted)."""
        current: dict[str, dict[str, Any]] = {}
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
            for item in page.get("items") or []:
                current[object_name(item)] = trim(item, self.resource)
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
                metadata = {**gone.get("metadata", {}), "resourceVersion": self.resource_version}
                self._apply(DELETED, {**gone, "metadata": metadata})
        for name, obj in current.items():
            before = self.objects.get(name)
            if before is None:
                self._apply(ADDED, obj)
            elif object_version(before) != object_version(obj):
                self._apply(MODIFIED, obj)

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
            version = object_version(obj)
            if event.get("type") != "BOOKMARK":
                self._apply(str(event.get("type")), trim(obj, self.resource))
            if version:
                self.resource_version = version

    def _apply(self, type_: str, obj: dict[str, Any]) -> None:
        """Keep one change (``obj``, trimmed) and offer it to the subscribers it concerns."""
        name = object_name(obj)
        before = self.objects.pop(name, None) if type_ == DELETED else self.objects.get(name)
        if type_ != DELETED:
            self.objects[name] = obj
        self.index.update(before, None if type_ == DELETED else obj)
        for sub in self.index.subscribers(before, obj):
            sub.offer(type_, obj)


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
        (``None``: no such watch, not listed yet, or no such object), a copy of its own. Costs
        no request."""
        key = _watch_key(hook, resource, namespace)
        for (watched, _), watch in self._watches.items():
            if watched == key and watch.synced and name in watch.objects:
                return copy.deepcopy(watch.objects[name])
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
        :meth:`Subscription.close`): for a subscriber that merges several subscriptions into one queue."""
        given = [label_selector] if isinstance(label_selector, str) else list(label_selector or ())
        # No selector, or an empty one among them, selects every object: the namespace-wide watch serves it.
        parts: dict[str, list[tuple[LabelTerm, ...]] | None] = {"": None}
        if name is None and given and all(given):
            grouped: dict[str, list[tuple[LabelTerm, ...]]] = {}
            for selector in given:
                grouped.setdefault(serving_scope(selector, scope), []).append(parse_selector(selector))
            parts = dict(grouped)
        key = _watch_key(hook, resource, namespace)
        joined: list[tuple[_SharedWatch, Subscriber]] = []
        for scoped, selectors in parts.items():
            watch = self._watches.get((key, scoped))
            if watch is None or watch.task.done():
                watch = self._watches[key, scoped] = _SharedWatch(
                    self, hook.copy(), resource, namespace, scoped
                )
            sub = Subscriber(name, selectors, deliver)
            watch.add(sub)
            joined.append((watch, sub))
        self._count(subscribers=1)
        return Subscription(self, key, joined)

    async def _leave(self, key: Hashable, joined: list[tuple[_SharedWatch, Subscriber]]) -> None:
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

    def __init__(self, hub: WatchHub, key: Hashable, joined: list[tuple[_SharedWatch, Subscriber]]):
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

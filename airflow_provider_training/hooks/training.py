"""The training-job hook: every Kubernetes API call the provider makes, written once (over :mod:`.transport`).

:class:`AsyncTrainingJobHook` is the one implementation (triggers, the watch hub and the log streamer use it
on their event loop). :class:`TrainingJobHook` is the thin sync facade operators use: it runs the same
coroutines on a private event loop in a daemon thread, the way kr8s builds its sync API over one async core.

Calls retry with backoff on 429 (honouring Retry-After), 500/502/503/504 and dropped connections, except a
create, sent once. What is done to a job as a whole (create at most once, delete with its children, wait
until deleted) is :mod:`airflow_provider_training.jobs`', over these calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from airflow.sdk import BaseHook

from airflow_provider_training.diagnostics import event_time
from airflow_provider_training.hooks.connection import (
    DEFAULT_CONN_ID,
    KubeSettings,
    build_configuration,
    default_namespace,
    load_connection_extras,
    load_connection_extras_sync,
    shared_configuration,
)
from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.loop_thread import LoopThread
from airflow_provider_training.hooks.parameters import HookParameters
from airflow_provider_training.hooks.transport import MERGE_PATCH, KubeTransport, LineStream
from airflow_provider_training.kinds.api import (
    collection_path,
    describe_request,
    encode_query,
    format_since_time,
    group_version_plural,
    object_path,
)
from airflow_provider_training.kinds.base import EVENTS, PODS, ChildResource, JobKind, ResourceRef

if TYPE_CHECKING:
    from airflow_provider_training.server_clock import ServerClock

__all__ = ["AsyncTrainingJobHook", "TrainingJobHook", "replica_selectors"]

P = ParamSpec("P")
R = TypeVar("R")

# A followed log that says nothing for this long is re-opened (a silently dead connection must not hang).
FOLLOW_IDLE_TIMEOUT = 300.0


class AsyncTrainingJobHook(HookParameters):
    """Kubernetes API access for training jobs on one ``kubernetes`` connection (clients shared per loop).

    Its parameters are :class:`HookParameters`' (``connection_extras`` skips resolving the connection: the
    sync facade resolves it in the caller's thread). Create the hook anywhere, use it on one event loop, and
    ``await close()`` when done.
    """

    default_conn_name = DEFAULT_CONN_ID
    __slots__ = ("_extras", "_settings", "_transport")

    def __post_init__(self) -> None:
        self._extras = dict(self.connection_extras) if self.connection_extras is not None else None
        self._settings: KubeSettings | None = None
        self._transport: KubeTransport | None = None

    # -- configuration ---------------------------------------------------------------------------------------

    def copy(self) -> AsyncTrainingJobHook:
        """A new hook (with its own client) on the same connection and settings."""
        return AsyncTrainingJobHook(**self.parameters(connection_extras=self._extras))

    async def get_settings(self) -> KubeSettings:
        """The merged cluster settings (connection resolved without blocking the loop)."""
        if self._settings is None:
            if self._extras is None:
                self._extras = await load_connection_extras(self.kubernetes_conn_id)
            self._settings = KubeSettings.from_extras(
                self._extras,
                config_file=self.config_file,
                cluster_context=self.cluster_context,
                namespace=self.namespace,
            )
        return self._settings

    async def get_namespace(self) -> str:
        """The explicit namespace, else the connection's ``namespace`` extra, else (on the pod's service
        account) the pod's namespace, else ``"default"``."""
        return default_namespace(await self.get_settings())

    async def transport(self) -> KubeTransport:
        """The hook's transport, created on first use (its clients are shared, see ``transport._Pool``)."""
        if self._transport is None:
            settings = await self.get_settings()
            configuration = await shared_configuration(settings)
            if self._transport is None:  # no other caller made it meanwhile
                self._transport = KubeTransport(
                    configuration,
                    request_timeout=self.request_timeout,
                    reload_credentials=lambda: build_configuration(settings),
                )
        return self._transport

    async def server_clock(self) -> ServerClock:
        """The API server's clock (see :class:`~airflow_provider_training.server_clock.ServerClock`)."""
        return (await self.transport()).clock

    @property
    def request_count(self) -> int:
        """HTTP requests this hook has sent (for benchmarks and tests)."""
        return self._transport.requests if self._transport is not None else 0

    async def close(self) -> None:
        if self._transport is not None:
            transport, self._transport = self._transport, None
            await transport.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retried: bool = True,
    ) -> dict[str, Any]:
        transport = await self.transport()
        params = encode_query(query or {})

        async def send(_attempt: int = 1) -> dict[str, Any]:
            return await transport.request(method, path, query=params, body=body, content_type=content_type)

        async with self._naming_served_versions():
            return await (self.retry.call(send) if retried else send())

    @contextlib.asynccontextmanager
    async def _naming_served_versions(self) -> AsyncIterator[None]:
        """A 404 for a resource the server does not serve in the asked version learns, from discovery, the
        versions it does serve it in (a CRD name two API releases share: a cluster serves one of them)."""
        try:
            yield
        except KubeApiError as err:
            if err.resource_not_served and (asked := group_version_plural(err.request)) is not None:
                err.served_in = await self._served_versions(*asked)
            raise

    async def _served_versions(self, group: str, asked: str, plural: str) -> list[str]:
        """The versions of ``group`` but ``asked`` that serve ``plural`` (best effort: none on an error)."""
        transport = await self.transport()
        try:
            api_group = await transport.request("GET", f"/apis/{group}")
            found = []
            for entry in api_group.get("versions") or []:
                version = str(entry.get("version") or "")
                if version and version != asked:
                    listed = await transport.request("GET", f"/apis/{group}/{version}")
                    if any(r.get("name") == plural for r in listed.get("resources") or []):
                        found.append(version)
            return found
        except Exception:  # discovery is only for a better message: the 404 is what is raised
            return []

    # -- any resource ----------------------------------------------------------------------------------------

    async def get_object(self, resource: ResourceRef, name: str, namespace: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            return await self._call("GET", object_path(resource, namespace, name))
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise

    async def list_objects(
        self,
        resource: ResourceRef,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """The List answer (``items`` and ``metadata.resourceVersion``): the whole list, or with ``limit`` a
        page of it, the next one asked with the answer's ``metadata.continue`` as ``continue_token``."""
        query = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
        }
        return await self._call("GET", collection_path(resource, namespace), query=query)

    async def create_object(
        self, resource: ResourceRef, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Create; sent once, not retried (a create repeated blindly could make a second object: see
        ``jobs.create_job``). A field the installed CRD does not declare (another release's, a typo the spec
        model let through) is refused with 400, not dropped without a trace as the API server otherwise does:
        nothing is created."""
        path = collection_path(resource, namespace)
        return await self._call("POST", path, query={"fieldValidation": "Strict"}, body=body, retried=False)

    async def delete_object(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
    ) -> bool:
        """Delete; ``False`` when it was already gone. With ``uid`` (a precondition), an object of that name
        with another uid is left alone: the server answers 409 Conflict, raised as :class:`KubeApiError`."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._call("DELETE", object_path(resource, namespace, name), body=body)
        except KubeApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    async def watch_objects(
        self,
        resource: ResourceRef,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """One watch request: ``{"type", "object"}`` events (BOOKMARK included) until the server ends it.

        An ``ERROR`` event (e.g. 410 Expired) is raised as :class:`KubeApiError`; a lost connection as
        :class:`~.errors.KubeConnectionError`. Reconnecting, relisting and backoff are the caller's (see
        ``watch.WatchHub``).
        """
        query = encode_query(
            {
                "watch": True,
                "allowWatchBookmarks": True,
                "resourceVersion": resource_version,
                "timeoutSeconds": timeout_seconds,
                "labelSelector": label_selector,
            }
        )
        transport = await self.transport()
        path = collection_path(resource, namespace)
        stream = await transport.open_stream(path, query=query, idle_timeout=timeout_seconds + 30)
        try:
            while (lines := await stream.lines()) is not None:
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        error = KubeApiError.from_status(event.get("object") or {})
                        error.request = describe_request("GET", path, query)
                        raise error
                    yield event
        finally:
            stream.close()

    # -- jobs ------------------------------------------------------------------------------------------------

    async def get_job(self, kind: JobKind, name: str, namespace: str) -> dict[str, Any] | None:
        return await self.get_object(kind.resource, name, namespace)

    async def find_jobs(self, kind: JobKind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return (await self.list_objects(kind.resource, namespace, label_selector=label_selector))["items"]

    async def patch_job(
        self, kind: JobKind, name: str, namespace: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386), the patch type custom resources accept."""
        path = object_path(kind.resource, namespace, name)
        return await self._call("PATCH", path, body=dict(patch), content_type=MERGE_PATCH)

    async def list_children(
        self, kind: JobKind, name: str, namespace: str
    ) -> dict[str, list[dict[str, Any]]]:
        """The ``needed_for_status`` children by resource key, as :attr:`JobKind.read_status` takes them.

        Entries sharing a resource are merged under its key (each object once).
        """
        wanted = [child for child in kind.children if child.needed_for_status]
        found = await asyncio.gather(*(self.find_children(kind, child, name, namespace) for child in wanted))
        children: dict[str, list[dict[str, Any]]] = {}
        for child, items in zip(wanted, found, strict=True):
            _merge_into(children.setdefault(child.resource.key, []), items)
        return children

    async def find_children(
        self, kind: JobKind, child: ChildResource, job_name: str, namespace: str
    ) -> list[dict[str, Any]]:
        """The objects of one child entry: the one named object if the entry names it, else by selector."""
        if child.name is not None:
            found = await self.get_object(child.resource, child.name(job_name), namespace)
            return [] if found is None else [found]
        listed = await self.list_objects(child.resource, namespace, label_selector=child.selector(job_name))
        items: list[dict[str, Any]] = listed["items"]
        if child.resource == PODS:
            items = [pod for pod in items if kind.owns_pod(job_name, pod)]
        return items

    # -- pods, events, logs ----------------------------------------------------------------------------------

    async def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return (await self.list_objects(PODS, namespace, label_selector=label_selector))["items"]

    async def list_job_pods(
        self, kind: JobKind, name: str, namespace: str, *, master: bool = False
    ) -> list[dict[str, Any]]:
        """The job's replica pods (``master``: the master's only): every selector of
        :func:`replica_selectors`, each pod once, and only those :attr:`JobKind.owns_pod` accepts."""
        listed = await asyncio.gather(
            *(
                self.list_pods(namespace, selector)
                for selector in replica_selectors(kind, name, master=master)
            )
        )
        pods: list[dict[str, Any]] = []
        for items in listed:
            _merge_into(pods, [pod for pod in items if kind.owns_pod(name, pod)])
        return pods

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_object(PODS, name, namespace)

    async def list_events(
        self,
        namespace: str,
        involved_name: str,
        involved_kind: str | None = None,
        *,
        uid: str | None = None,
    ) -> list[dict[str, Any]]:
        """Events about one object, oldest first (by ``diagnostics.event_time``, the one ordering of events).
        With ``uid``, only about that very object: events outlive their objects, and a job (or pod) created
        again under the same name is another object."""
        selector = f"involvedObject.name={involved_name}"
        if involved_kind:
            selector += f",involvedObject.kind={involved_kind}"
        if uid:
            selector += f",involvedObject.uid={uid}"
        items = (await self.list_objects(EVENTS, namespace, field_selector=selector))["items"]
        return sorted(items, key=event_time)

    async def read_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        tail_lines: int | None = None,
        since_time: datetime | None = None,
        previous: bool = False,
        timestamps: bool = False,
    ) -> str:
        """A container's log so far, decoded by us (UTF-8, invalid bytes replaced).

        ``since_time`` has the API's one-second resolution.
        """
        query = encode_query(
            {
                "container": container,
                "tailLines": tail_lines,
                "sinceTime": format_since_time(since_time),
                "previous": previous or None,
                "timestamps": timestamps or None,
            }
        )
        transport = await self.transport()
        path = object_path(PODS, namespace, pod, "log")
        raw = await self.retry.call(lambda _attempt: transport.read_bytes(path, query=query))
        return raw.decode("utf-8", errors="replace")

    async def follow_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since_time: datetime | None = None,
        timestamps: bool = True,
    ) -> AsyncIterator[str]:
        """The container's log lines as they are written, until the container ends.

        Opening the stream is retried; a connection dropped mid-stream, or silent for
        ``FOLLOW_IDLE_TIMEOUT``, raises :class:`~.errors.KubeConnectionError` (resuming without loss or
        duplicates needs the timestamps, which ``logs.ReplicaLogStreamer`` does).
        """
        stream = await self.open_log(namespace, pod, container, since_time=since_time, timestamps=timestamps)
        try:
            while (lines := await stream.lines()) is not None:
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
        finally:
            stream.close()

    async def open_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since_time: datetime | None = None,
        timestamps: bool = True,
    ) -> LineStream:
        """:meth:`follow_log`'s stream, opened (retried), its lines as bytes: ``await stream.lines()`` gives
        the next ones as they arrive and ``None`` at the end; ``close()`` it when done."""
        query = encode_query(
            {
                "container": container,
                "follow": True,
                "sinceTime": format_since_time(since_time),
                "timestamps": timestamps or None,
            }
        )
        transport = await self.transport()
        path = object_path(PODS, namespace, pod, "log")
        return await self.retry.call(
            lambda _attempt: transport.open_stream(path, query=query, idle_timeout=FOLLOW_IDLE_TIMEOUT)
        )


def replica_selectors(kind: JobKind, job_name: str, *, master: bool = False) -> tuple[str, ...]:
    """The label selectors whose pods are the job's replicas: the master selector alone for ``master``, else
    the pod selector and the kind's extra ones. Pods they select still need :attr:`JobKind.owns_pod`."""
    if master:
        return (kind.master_selector(job_name),)
    return (kind.pod_selector(job_name), *kind.extra_pod_selectors(job_name))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _merge_into(merged: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    """Append the objects not in ``merged`` yet (by uid, else by name)."""
    seen = {(obj.get("metadata") or {}).get("uid") or _name(obj) for obj in merged}
    for obj in items:
        key = (obj.get("metadata") or {}).get("uid") or _name(obj)
        if key not in seen:
            seen.add(key)
            merged.append(obj)


def _sync(
    method: Callable[Concatenate[AsyncTrainingJobHook, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[TrainingJobHook, P], R]:
    """The sync twin of an async hook method: the same coroutine, run on the facade's private loop."""

    @functools.wraps(method)
    def call(self: TrainingJobHook, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(method(self.async_hook, *args, **kwargs))

    return call


def _sync_iter(
    method: Callable[Concatenate[AsyncTrainingJobHook, P], AsyncIterator[R]],
) -> Callable[Concatenate[TrainingJobHook, P], Iterator[R]]:
    """The sync twin of an async-generator hook method: items fetched one by one from the private loop."""

    @functools.wraps(method)
    def call(self: TrainingJobHook, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        return self._loop_thread().iterate(method(self.async_hook, *args, **kwargs))

    return call


class TrainingJobHook(HookParameters, BaseHook):
    """Sync facade over :class:`AsyncTrainingJobHook`, for operators; the same parameters
    (:class:`HookParameters`) and the same methods, without ``await``.

    Each instance owns one private event loop in a daemon thread and one async hook (one transport) on it;
    :meth:`run` runs other coroutines on that loop. The connection is resolved in the caller's thread. Call
    :meth:`close` (or use ``with``) when done.
    """

    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "kubernetes"
    hook_name = "Kubernetes training jobs"

    def __post_init__(self) -> None:
        BaseHook.__init__(self)
        self._async_hook: AsyncTrainingJobHook | None = None
        self._loop: LoopThread | None = None

    @property
    def async_hook(self) -> AsyncTrainingJobHook:
        """The async core this facade drives (connection resolved here, outside any event loop)."""
        if self._async_hook is None:
            extras = self.connection_extras
            if extras is None:
                extras = load_connection_extras_sync(self.kubernetes_conn_id)
            self._async_hook = AsyncTrainingJobHook(**self.parameters(connection_extras=extras))
        return self._async_hook

    def _loop_thread(self) -> LoopThread:
        if self._loop is None or self._loop.closed:
            self._loop = LoopThread(name=f"training-hook-{self.kubernetes_conn_id}")
        return self._loop

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on this hook's private event loop and return its result (or raise its error) here.

        For async work written against :attr:`async_hook`, run where the sync methods run: on the same loop,
        with the same client and connection (a :class:`~airflow_provider_training.waiting.JobWaiter`'s wait in
        the sync mode). Every sync method is its async twin passed through here. Interrupting the caller
        cancels the coroutine. From a coroutine on that loop, await instead: this raises ``RuntimeError``.
        """
        return self._loop_thread().run(coro)

    def get_conn(self) -> AsyncTrainingJobHook:
        return self.async_hook

    def close(self) -> None:
        """Close the client and stop the private loop."""
        if self._loop is None:
            return
        if self._async_hook is not None and not self._loop.closed:
            self._loop.run(self._async_hook.close())
        self._loop.close()
        self._async_hook = None

    def __enter__(self) -> TrainingJobHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    get_namespace = _sync(AsyncTrainingJobHook.get_namespace)
    server_clock = _sync(AsyncTrainingJobHook.server_clock)
    get_job = _sync(AsyncTrainingJobHook.get_job)
    find_jobs = _sync(AsyncTrainingJobHook.find_jobs)
    patch_job = _sync(AsyncTrainingJobHook.patch_job)
    list_children = _sync(AsyncTrainingJobHook.list_children)
    list_pods = _sync(AsyncTrainingJobHook.list_pods)
    list_job_pods = _sync(AsyncTrainingJobHook.list_job_pods)
    find_children = _sync(AsyncTrainingJobHook.find_children)
    get_pod = _sync(AsyncTrainingJobHook.get_pod)
    list_events = _sync(AsyncTrainingJobHook.list_events)
    read_log = _sync(AsyncTrainingJobHook.read_log)
    get_object = _sync(AsyncTrainingJobHook.get_object)
    list_objects = _sync(AsyncTrainingJobHook.list_objects)
    create_object = _sync(AsyncTrainingJobHook.create_object)
    delete_object = _sync(AsyncTrainingJobHook.delete_object)

    follow_log = _sync_iter(AsyncTrainingJobHook.follow_log)

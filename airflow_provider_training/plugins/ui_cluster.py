"""The cluster side of the Training tab: one snapshot of a job at a time, shared by every viewer.

A :class:`Snapshot` is what one refresh of the tab needs from the Kubernetes API: the job, its status (the
kind's ``read_status``, with its status children where the kind needs them), its replica pods and the events
of each of them (field-selected by name, kind and uid). :class:`SnapshotCache` keeps each job's
snapshot for :data:`REFRESH_SECONDS` in this api-server process, and viewers asking while one is being read
wait for that read: however many tabs are open on a job, it costs one snapshot per period (the figure is in
``docs/ui-tab.md``). A failed read is kept as long, so an unreachable cluster is not asked any harder.

:class:`Hooks` keeps one :class:`~airflow_provider_training.hooks.training.AsyncTrainingJobHook` per
connection on the api-server's event loop, re-created after :data:`HOOK_MAX_AGE` seconds so an edited
connection is picked up.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_training.hooks.errors import (
    RBAC_DOC,
    CredentialPluginError,
    KubeApiError,
    KubeConnectionError,
)
from airflow_provider_training.hooks.retry import RetryPolicy
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import JobKind, JobStatus, RawObject

REFRESH_SECONDS = 5.0
HOOK_MAX_AGE = 300.0
# A tab waits for an answer, not for a job: few, short retries, and a request timeout to match.
UI_RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_delay=1.0)
REQUEST_TIMEOUT = 10.0
_CREDENTIALS_IN_URL = re.compile(r"//[^/@\s]+@")
log = logging.getLogger(__name__)


class ClusterError(Exception):
    """The cluster could not be read: unreachable, or the connection's credentials were refused. The
    message is one plain sentence naming the request, never a credential."""


@dataclass(frozen=True)
class Snapshot:
    """A job as the cluster has it now; ``job`` is ``None`` when it is gone (or the name is another job's)."""

    job: RawObject | None
    status: JobStatus | None = None
    pods: list[RawObject] = field(default_factory=list)
    events: list[RawObject] = field(default_factory=list)


class Hooks:
    """One hook per connection on one event loop, re-created when older than :data:`HOOK_MAX_AGE`."""

    def __init__(self) -> None:
        self._hooks: dict[tuple[int, str], tuple[float, AsyncTrainingJobHook]] = {}

    def get(self, conn_id: str) -> AsyncTrainingJobHook:
        key = (id(asyncio.get_running_loop()), conn_id)
        now = time.monotonic()
        made = self._hooks.get(key)
        if made is not None and now - made[0] < HOOK_MAX_AGE:
            return made[1]
        if made is not None:
            asyncio.get_running_loop().create_task(made[1].close())
        hook = AsyncTrainingJobHook(conn_id, retry=UI_RETRY, request_timeout=REQUEST_TIMEOUT)
        self._hooks[key] = (now, hook)
        return hook

    async def close(self) -> None:
        hooks, self._hooks = self._hooks, {}
        for _, hook in hooks.values():
            await hook.close()


class SnapshotCache:
    """Each key's value for ``ttl`` seconds; concurrent askers share one load (errors are kept as long)."""

    def __init__(self, ttl: float = REFRESH_SECONDS) -> None:
        self.ttl = ttl
        self._entries: dict[Hashable, tuple[float, asyncio.Future[Any]]] = {}

    async def get(self, key: Hashable, load: Callable[[], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        now = loop.time()
        entry = self._entries.get(key)
        if entry is None or (entry[1].done() and now - entry[0] >= self.ttl):
            self._prune(now)
            entry = (now, asyncio.ensure_future(load()))
            entry[1].add_done_callback(_retrieve)
            self._entries[key] = entry
        return await asyncio.shield(entry[1])

    def _prune(self, now: float) -> None:
        for key, (at, future) in list(self._entries.items()):
            if future.done() and now - at >= self.ttl:
                del self._entries[key]


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failed load's exception as seen (it is re-raised to every asker)."""
    if not future.cancelled():
        future.exception()


async def read_snapshot(
    hook: AsyncTrainingJobHook, kind: JobKind, name: str, namespace: str, uid: str | None
) -> Snapshot:
    """The job, its status, pods and their events (one request per object); raises :class:`ClusterError`."""
    from airflow_provider_training.operators.training import status_grace_period

    try:
        job = await hook.get_job(kind, name, namespace)
        if job is None or (uid and _uid(job) != uid):
            return Snapshot(job=None)
        needs_children = any(child.needed_for_status for child in kind.children)
        children, pods = await asyncio.gather(
            hook.list_children(kind, name, namespace) if needs_children else _nothing(),
            hook.list_job_pods(kind, name, namespace),
        )
        # Each object's own events (field selectors on name, kind and uid), as the waiter reads them: a
        # shared namespace's every event is not pulled into the api-server on each refresh.
        involved = [job, *pods, *(c for items in children.values() for c in items)]
        listed = await asyncio.gather(
            *(
                hook.list_events(namespace, obj["metadata"]["name"], obj.get("kind"), uid=_uid(obj))
                for obj in involved
            )
        )
    except Exception as err:
        raise ClusterError(describe_failure(err, hook.kubernetes_conn_id)) from err
    status = kind.status(
        job, children, grace_seconds=status_grace_period(), now=(await hook.server_clock()).now()
    )
    return Snapshot(job=job, status=status, pods=pods, events=[e for events in listed for e in events])


async def _nothing() -> dict[str, list[RawObject]]:
    return {}


def describe_failure(err: BaseException, conn_id: str | None) -> str:
    """One plain sentence on why the cluster could not be read, naming the verb and resource (as RBAC
    names them) where the API answered; never a credential. A credential plugin's failure is only named: what
    the plugin said goes to the api-server's log (it may hold a token), not to every viewer of the DAG."""
    conn = f"connection {conn_id!r}"
    if isinstance(err, CredentialPluginError):
        log.warning("The Training tab could not obtain the credentials of %s: %s", conn, err)
        return (
            f"Could not obtain credentials for the cluster of {conn}: its kubeconfig's exec or auth-provider "
            "plugin failed; see the api-server's log."
        )
    if isinstance(err, KubeApiError):
        asked = err.request or "a request"
        if refused := err.refused:
            answer = f"{err.status} {err.reason or 'Forbidden'}"
            return (
                f"The Kubernetes API refused {refused.permission()} ({answer}) to the credentials of {conn};"
                f" the Training tab needs `get` on the job, `pods` and `pods/log`, and `list` on `pods` and "
                f"`events` ({RBAC_DOC})."
            )
        if err.status in (401, 403):
            return (
                f"The Kubernetes API refused to {asked} ({err.status} {err.reason or 'Forbidden'}) with the "
                f"credentials of {conn} ({RBAC_DOC})."
            )
        return f"The Kubernetes API could not {asked} ({err.status} {err.reason}) for {conn}."
    if isinstance(err, ClusterError):
        return str(err)
    reason = _CREDENTIALS_IN_URL.sub("//", str(err)) or type(err).__name__
    if isinstance(err, OSError | TimeoutError | KubeConnectionError):
        return f"The Kubernetes API of {conn} could not be reached: {reason}."
    return f"The Kubernetes API of {conn} could not be used: {reason}."


def _uid(obj: RawObject) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


# This api-server process's hooks and snapshots, shared by every tab.
HOOKS = Hooks()
SNAPSHOTS = SnapshotCache()

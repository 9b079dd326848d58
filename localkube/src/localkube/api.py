"""The one interface localkube's controllers and kubelet talk to an API through.

Two backends implement it:

- `localkube.store.Store`, the in-process store itself (what `LocalKube` runs its controllers and runtime on):
  no adapter, no copy more than before;
- `localkube.remote.RemoteApi`, any Kubernetes API server over HTTP (what `localkube agent` runs them on):
  reads come from a mirror kept by LIST+WATCH, writes go to the server and their answers are applied to the
  mirror at once.

Reads and writes are synchronous and called on the event loop the controllers run on; `subscribe` needs that
loop running. Every call returns copies the caller may change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from localkube.podlogs import PodLogs
    from localkube.resources import ResourceType
    from localkube.store import IndexKey, Items
    from localkube.subscriptions import Subscription


class ClusterApi(Protocol):
    """Exactly what the controllers, the kubelet and the event recorder use. Errors are `ApiError`s."""

    # -- types ---------------------------------------------------------------------------------------------
    def resource_type(self, group: str, version: str, plural: str) -> ResourceType:
        """The served type; ApiError 404 if the API does not serve it."""

    def resource_types(self) -> list[ResourceType]: ...

    # -- reads ---------------------------------------------------------------------------------------------
    def get(self, rt: ResourceType, namespace: str, name: str) -> dict: ...

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Items: ...

    def add_index(self, rt: ResourceType, index: str, key: IndexKey) -> None: ...

    def by_index(self, rt: ResourceType, index: str, key: Hashable, limit: int | None = None) -> Items: ...

    def index_count(self, rt: ResourceType, index: str, key: Hashable) -> int: ...

    def subscribe(self, rt: ResourceType | None = None, namespace: str | None = None) -> Subscription:
        """Every change from now on, the caller's own writes included (each once)."""

    # -- writes --------------------------------------------------------------------------------------------
    def create(self, rt: ResourceType, namespace: str, obj: dict) -> dict: ...

    def replace(
        self, rt: ResourceType, namespace: str, name: str, obj: dict, subresource: str | None = None
    ) -> dict: ...

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        subresource: str | None = None,
    ) -> dict: ...

    def update_status(self, rt: ResourceType, namespace: str, name: str, status: dict) -> dict:
        """Write `.status` whole and unconditionally (the status subresource where the type has one)."""

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict: ...

    def bind_pod(self, namespace: str, name: str, node: str, *, unbound_only: bool = False) -> dict:
        """Assign the pod to `node` (the scheduler's binding); returns the pod as it is now."""


log = logging.getLogger(__name__)


class ClusterContext(Protocol):
    """What a controller's or a runtime's `run(cluster)` reads: a `LocalKube`, or an `Agent`."""

    @property
    def store(self) -> ClusterApi: ...

    @property
    def logs(self) -> PodLogs: ...


class Worker(Protocol):
    """A controller or a pod runtime."""

    async def run(self, cluster: ClusterContext) -> None: ...


async def supervise(worker: Worker, context: ClusterContext, errors: list[BaseException]) -> None:
    """Run one controller or runtime until cancelled; a crash is logged and recorded in `errors`."""
    try:
        await worker.run(context)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("localkube: %s stopped", type(worker).__name__)
        errors.append(exc)


if TYPE_CHECKING:
    from localkube.remote import RemoteApi
    from localkube.store import Store

    def _both_backends_conform(store: Store, remote: RemoteApi) -> tuple[ClusterApi, ClusterApi]:
        """Not called: mypy checks here that each backend implements the whole interface."""
        return store, remote

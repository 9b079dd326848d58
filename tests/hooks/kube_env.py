"""Shared fixtures and helpers for the hook, watch hub and log streamer tests: a real localkube over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from localkube.resources import ResourceType

from airflow_provider_training.hooks.retry import RetryPolicy
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import JobKind, ResourceRef

CONN_ID = "kube_test"
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@contextlib.asynccontextmanager
async def local_cluster(tmp_path: Path, **options: Any) -> AsyncIterator[LocalKube]:
    """localkube in the running loop; unless ``options`` say otherwise without controllers or pod runtime, so
    the test writes the state."""
    options = {"runtime": None, "controllers": [], **options}
    async with LocalKube(**options) as cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        yield cluster


@contextlib.asynccontextmanager
async def cluster_and_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[tuple[LocalKube, AsyncTrainingJobHook]]:
    """A :func:`local_cluster` with LocalKube ``options``, and a hook on a connection pointing at it."""
    async with local_cluster(tmp_path, **options) as cluster:
        hook = AsyncTrainingJobHook(use_connection(monkeypatch, cluster), retry=FAST_RETRY)
        try:
            yield cluster, hook
        finally:
            await hook.close()


def use_connection(monkeypatch: pytest.MonkeyPatch, cluster: LocalKube, namespace: str = "team-a") -> str:
    """An Airflow ``kubernetes`` connection (``AIRFLOW_CONN_...``) whose kube_config_path is localkube's."""
    assert cluster.kubeconfig is not None
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", connection_json(cluster.kubeconfig, namespace))
    return CONN_ID


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded, as a guard against hanging) until ``condition()`` holds; no timing is asserted."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


def rtype(cluster: LocalKube, ref: ResourceRef) -> ResourceType:
    return cluster.store.resource_type(ref.group, ref.version, ref.plural)


def requests_to(
    cluster: LocalKube, plural: str, *, method: str = "GET", watch: bool | None = None
) -> list[Any]:
    """The recorded requests to a resource collection or its objects."""
    found = []
    for record in cluster.requests:
        if record.method != method or f"/{plural}" not in record.path:
            continue
        is_watch = record.query.get("watch", "").lower() == "true"
        if watch is None or watch == is_watch:
            found.append(record)
    return found


def job_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }


def pod_manifest(
    kind: JobKind, job: str, replica_type: str, index: int, *, container: str | None = None
) -> dict[str, Any]:
    """A replica pod labelled the way the kind finds it (labels taken from the kind's own selectors)."""
    selector = kind.master_selector(job) if replica_type.lower() == "master" else kind.pod_selector(job)
    labels = dict(term.split("=", 1) for term in selector.split(","))
    labels["training.kubeflow.org/replica-type"] = replica_type.lower()
    labels["training.kubeflow.org/replica-index"] = str(index)
    name = f"{job}-{replica_type.lower()}-{index}"
    spec = {"containers": [{"name": container or kind.default_container, "image": "busybox"}]}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def container_status(name: str, state: str, *, restarts: int = 0, exit_code: int = 0) -> dict[str, Any]:
    states = {
        "waiting": {"waiting": {"reason": "ContainerCreating"}},
        "running": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        "terminated": {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Done"}},
    }
    return {"name": name, "state": states[state], "restartCount": restarts, "ready": state == "running"}


def set_pod_state(cluster: LocalKube, pod: dict[str, Any], phase: str, state: str, **kw: Any) -> None:
    """Write the pod's status as a kubelet would: phase and its one container's state."""
    from localkube.resources import PODS

    container = pod["spec"]["containers"][0]["name"]
    status = {"phase": phase, "containerStatuses": [container_status(container, state, **kw)]}
    cluster.store.update_status(PODS, "default", pod["metadata"]["name"], status)


def deaf_follows(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """Make a follow's wait for its pod's next change swallow every cancellation: a follow that does not end
    when stopped. Returns ``(entered, release)``: set once a follow is in that wait; set it to let the follow
    end (as the cancellation it swallowed would have ended it)."""
    from airflow_provider_training.log_follow import FollowedPod

    entered, release = asyncio.Event(), asyncio.Event()

    async def deaf_to_cancel(self: Any, timeout: float | None = None) -> None:
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        raise asyncio.CancelledError

    monkeypatch.setattr(FollowedPod, "wait_change", deaf_to_cancel)
    return entered, release

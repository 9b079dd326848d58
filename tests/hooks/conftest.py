"""Hook test fixtures: localkube over HTTP and a hook on a ``kubernetes`` connection pointing at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from localkube.cluster import LocalKube

from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from tests.hooks.kube_env import FAST_RETRY, local_cluster, use_connection
from tests.hooks.tls_server import server  # noqa: F401 (the kubeconfig tests' HTTPS server, a fixture)


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[LocalKube]:
    async with local_cluster(tmp_path) as cluster:
        yield cluster


@pytest.fixture
def kube_conn(kube: LocalKube, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_connection(monkeypatch, kube)


@pytest_asyncio.fixture
async def hook(kube_conn: str) -> AsyncIterator[AsyncTrainingJobHook]:
    h = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    yield h
    await h.close()


@pytest.fixture
def thread_kube(tmp_path: Path) -> Iterator[LocalKube]:
    """localkube on its own loop in a thread, for sync callers."""
    with LocalKube(runtime=None, controllers=[]) as cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        yield cluster

"""Fixtures for localkube's own tests: a bare cluster (no controllers, no runtime) and real clients (the
user-facing fixtures, ``localkube`` and the rest, load through the ``pytest11`` entry point)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from localkube.cluster import LocalKube


@pytest.fixture
def kube() -> Iterator[LocalKube]:
    """A bare cluster in a thread: no controllers, no runtime, bookmarks every 0.2 s."""
    cluster = LocalKube(controllers=[], runtime="none", bookmark_interval=0.2, history_size=50)
    with cluster:
        yield cluster


@pytest.fixture
def kubeconfig(kube: LocalKube, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    """The real sync client, configured from the kubeconfig into its own Configuration."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)

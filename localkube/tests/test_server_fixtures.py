"""The user-facing pytest fixtures (localkube.pytest_plugin, loaded through the pytest11 entry point)."""

from __future__ import annotations

import json
import os

import kubernetes_asyncio
from kubernetes import client, config
from localkube.cluster import LocalKube


def test_localkube_fixture_serves_with_controllers(localkube: LocalKube) -> None:
    assert localkube.kubeconfig is not None and localkube.kubeconfig.exists()
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(localkube.kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        assert client.CoreV1Api(api).list_namespaced_pod("default").items == []
    assert localkube.runtime == "scripted"


def test_localkube_conn_points_the_default_connection_at_the_cluster(
    localkube: LocalKube, localkube_conn: str
) -> None:
    # Airflow reads AIRFLOW_CONN_<ID> as this JSON (the provider's tests resolve it through Airflow itself)
    assert localkube_conn == "kubernetes_default"
    assert json.loads(os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"]) == {
        "conn_type": "kubernetes",
        "extra": {"kube_config_path": str(localkube.kubeconfig), "namespace": "default"},
    }


async def test_localkube_async_runs_in_the_test_loop(localkube_async: LocalKube) -> None:
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(localkube_async.kubeconfig), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        pods = await kubernetes_asyncio.client.CoreV1Api(api).list_namespaced_pod("default")
    assert pods.items == []

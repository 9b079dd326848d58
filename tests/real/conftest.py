"""One real cluster per session (tests/real/cluster.py), from the binaries in ``$REALKUBE_BIN``
(`make test-real` builds them and sets it). Every test here is marked ``real``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.pytest_plugin import connection_json

from tests.fixtures import CRDS
from tests.real.cluster import RealCluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """etcd, kube-apiserver, kube-controller-manager and ``localkube agent`` (scripted runtime, the Kubeflow
    operator emulation), for the whole session."""
    if not os.environ.get("REALKUBE_BIN"):
        pytest.fail("tests/real needs REALKUBE_BIN, the binaries' directory: run them with `make test-real`")
    bin_dir = Path(os.environ["REALKUBE_BIN"])
    cluster = RealCluster(bin_dir=bin_dir, directory=tmp_path_factory.mktemp("realkube"), crd_dir=CRDS)
    cluster.start()
    print(
        f"\nreal cluster {cluster.version} at {cluster.url}; CRDs installed: {len(cluster.crds_installed)}; "
        f"dropped: {cluster.crds_dropped or 'none'}"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def admin_conn(real_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection as cluster admin, namespace ``default``."""
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(real_cluster.kubeconfig))
    return "kubernetes_default"

"""One real cluster per session (localkube.realcluster), from the binaries in ``$REALKUBE_BIN``
(`make test-real` builds them and sets it). Every test here is marked ``real``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from tests.fixtures import CRDS
from tests.real.rbac import bind_documented, documented_rbac

SUMMARY: list[str] = []  # what the session's cluster was, for the terminal summary


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in SUMMARY:
        terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.real)


@contextmanager
def launch(tmp_path_factory: pytest.TempPathFactory, name: str, **options: Any) -> Iterator[RealCluster]:
    """A real cluster (``options`` go to RealCluster: ``crd_dir``, ``apiserver_args``) until the block
    ends."""
    if not os.environ.get("REALKUBE_BIN"):
        pytest.fail("tests/real needs REALKUBE_BIN, the binaries' directory: run them with `make test-real`")
    options.setdefault("crd_dir", CRDS)
    cluster = RealCluster(
        bin_dir=Path(os.environ["REALKUBE_BIN"]), directory=tmp_path_factory.mktemp(name), **options
    )
    cluster.start()
    SUMMARY.append(
        f"{name} cluster {cluster.version} at {cluster.url}: "
        f"CRDs installed {', '.join(cluster.crds_installed)}; "
        f"not installed: {cluster.crds_dropped or 'none'}; component logs in {cluster.directory}"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """etcd, kube-apiserver, kube-controller-manager and ``localkube agent`` (scripted runtime, the Kubeflow
    operator emulation), for the whole session."""
    with launch(tmp_path_factory, "realkube") as cluster:
        yield cluster


@pytest.fixture
def admin_conn(real_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection as cluster admin, namespace ``default``."""
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(real_cluster.kubeconfig))
    return "kubernetes_default"


# -- RBAC: exactly the Role of docs/rbac.md ----------------------------------------------------------------


def as_documented_account(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point ``kubernetes_default`` at ``kubeconfig`` in the documented Role's namespace; returns it."""
    namespace = str(documented_rbac()[0]["metadata"]["namespace"])
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(kubeconfig, namespace))
    return namespace


@pytest.fixture(scope="session")
def service_account_kubeconfig(real_cluster: RealCluster) -> Path:
    """A kubeconfig for the documented ServiceAccount, bound to exactly the documented Role."""
    return bind_documented(real_cluster)


@pytest.fixture
def sa_conn(service_account_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return as_documented_account(service_account_kubeconfig, monkeypatch)


# -- the families other than Kubeflow v1 (tests/real/test_families*.py) ------------------------------------


@pytest.fixture(scope="session")
def legacy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A second cluster for EDL, both legacy MXNet lineages, T9k and the MPI Operator's v2beta1 MPIJob: their
    CRDs, written from the reference documents (``mxjobs.kubeflow.org`` is also the Kubeflow v1 MXJob's name),
    and upstream's for the MPIJob (``mpijobs.kubeflow.org`` is also the v1 MPIJob's), and the agent running
    their operator emulations (kube-controller-manager is the batch Job and ReplicaSet controller)."""
    from tests.real.families_real import AGENT_ARGS, family_crd_dir

    crd_dir = family_crd_dir(tmp_path_factory.mktemp("family-crds"))
    with launch(tmp_path_factory, "legacykube", crd_dir=crd_dir, agent_args=AGENT_ARGS) as cluster:
        yield cluster


@pytest.fixture
def legacy_admin_conn(legacy_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection to the families' cluster as admin; returns the namespace."""
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(legacy_cluster.kubeconfig))
    return "default"


@pytest.fixture(scope="session")
def legacy_service_account_kubeconfig(legacy_cluster: RealCluster) -> Path:
    """The documented ServiceAccount on the families' cluster, bound to exactly the documented Role."""
    return bind_documented(legacy_cluster)


@pytest.fixture
def legacy_sa_conn(legacy_service_account_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection to the families' cluster as the documented ServiceAccount;
    returns the Role's namespace."""
    return as_documented_account(legacy_service_account_kubeconfig, monkeypatch)

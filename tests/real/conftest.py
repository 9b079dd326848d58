"""One real cluster per session (localkube.realcluster), from the binaries in ``$REALKUBE_BIN``
(`make test-real` builds them and sets it). Every test here is marked ``real``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from tests.fixtures import CRDS

RBAC_DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"


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


def documented_rbac() -> list[dict]:
    """The Role and RoleBinding of docs/rbac.md, parsed from its YAML code block."""
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.S)
    documents = [d for block in blocks for d in yaml.safe_load_all(block) if d]
    kinds = [d["kind"] for d in documents]
    assert kinds == ["Role", "RoleBinding"], kinds
    return documents


@pytest.fixture(scope="session")
def service_account_kubeconfig(real_cluster: RealCluster) -> Path:
    """A kubeconfig for the documented ServiceAccount, bound to exactly the documented Role."""
    role, binding = documented_rbac()
    namespace = role["metadata"]["namespace"]
    (subject,) = binding["subjects"]
    for name in {namespace, subject["namespace"]}:
        real_cluster.create_namespace(name)
    real_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": subject["name"], "namespace": subject["namespace"]},
        }
    )
    real_cluster.apply(role)
    real_cluster.apply(binding)
    token = real_cluster.service_account_token(subject["namespace"], subject["name"])
    user = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    return real_cluster.kubeconfig_for(user, token)


@pytest.fixture
def sa_conn(service_account_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    namespace = documented_rbac()[0]["metadata"]["namespace"]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(service_account_kubeconfig, namespace)
    )
    return namespace


# -- the families other than Kubeflow v1 (tests/real/test_families*.py) ------------------------------------


@pytest.fixture(scope="session")
def legacy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A second cluster for EDL, both legacy MXNet lineages and T9k: their CRDs, written from the reference
    documents (``mxjobs.kubeflow.org`` is also the Kubeflow v1 MXJob's name), and the agent running their
    operator emulations (kube-controller-manager is the batch Job and ReplicaSet controller)."""
    from tests.real.families_real import AGENT_ARGS, CRDS_WRITTEN

    with launch(tmp_path_factory, "legacykube", crd_dir=CRDS_WRITTEN, agent_args=AGENT_ARGS) as cluster:
        yield cluster


@pytest.fixture
def legacy_admin_conn(legacy_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection to the families' cluster as admin; returns the namespace."""
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(legacy_cluster.kubeconfig))
    return "default"


@pytest.fixture(scope="session")
def legacy_service_account_kubeconfig(legacy_cluster: RealCluster) -> Path:
    """The documented ServiceAccount on the families' cluster, bound to exactly the documented Role."""
    from tests.real.families_real import bind_service_account

    role, binding = documented_rbac()
    (subject,) = binding["subjects"]
    namespace = role["metadata"]["namespace"]
    return bind_service_account(legacy_cluster, role, namespace, subject["name"], subject["namespace"])


@pytest.fixture
def legacy_sa_conn(legacy_service_account_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``kubernetes_default`` connection to the families' cluster as the documented ServiceAccount;
    returns the Role's namespace."""
    namespace = documented_rbac()[0]["metadata"]["namespace"]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(legacy_service_account_kubeconfig, namespace)
    )
    return namespace

"""Fixtures for localkube's own tests: a bare cluster (no controllers, no runtime) and real clients (the
user-facing fixtures, ``localkube`` and the rest, load through the ``pytest11`` entry point).

The API-level tests take their clients from ``server``, a parametrized backend: ``localkube`` always, and
``real`` (marked ``real``: a real kube-apiserver, ``localkube.realcluster``, one per session) only when
``REALKUBE_BIN`` names its binaries, so that `make test` runs them against localkube alone and
`make test-real` against the referee as well. A test that uses ``kube`` (localkube's store, faults, gates or
admin endpoints) runs against localkube only.
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config
from localkube.cluster import LocalKube
from localkube.realcluster import RealCluster

# The upstream CRDs the provider's tests vendor: what the real server validates custom objects against.
CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube_runtime(name): the pod runtime of the ``kube`` fixture's cluster"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    params = [pytest.param("localkube")]
    if os.environ.get("REALKUBE_BIN") and "kube" not in metafunc.fixturenames:
        params.append(pytest.param("real", marks=pytest.mark.real))
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """ "localkube" or "real" (see the module's docstring)."""
    return str(request.param)


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[LocalKube]:
    """A bare cluster in a thread: no controllers, no runtime (``@pytest.mark.kube_runtime("scripted")``
    gives it one), bookmarks every 0.2 s."""
    marker = request.node.get_closest_marker("kube_runtime")
    runtime = marker.args[0] if marker else "none"
    cluster = LocalKube(controllers=[], runtime=runtime, bookmark_interval=0.2, history_size=50)
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """etcd, kube-apiserver, kube-controller-manager and ``localkube agent`` as the kubelet (scripted runtime,
    no training-operator emulation: nothing but the test writes a custom object's status)."""
    cluster = RealCluster(
        bin_dir=Path(os.environ["REALKUBE_BIN"]),
        directory=tmp_path_factory.mktemp("apiref"),
        crd_dir=CRDS,
        agent_args=("--runtime", "scripted", "--controllers", "none"),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Server:
    """The API server a test talks to: its kubeconfig (an administrator), the namespace the test owns, and
    what differs between the backends."""

    backend: str
    kubeconfig: Path
    namespace: str
    local: LocalKube | None = None
    real: RealCluster | None = None

    def create_namespace(self, suffix: str) -> str:
        """A further namespace for the test (on the shared real cluster a unique name); returns its name."""
        if self.local is not None:
            self.local.create_namespaces(suffix)
            return suffix
        assert self.real is not None
        name = f"{self.namespace}-{suffix}"
        self.real.create_namespace(name)
        return name

    def get(self, path: str) -> bytes:
        """A raw GET as the administrator (for what the clients cannot ask)."""
        if self.real is not None:
            return self.real.request("GET", path)
        assert self.local is not None
        request = urllib.request.Request(
            self.local.url + path, headers={"Authorization": f"Bearer {self.local.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())

    def anonymous(self, method: str, path: str) -> tuple[int, bytes]:
        """A request without credentials: its status and body."""
        url = self.real.url if self.real else self.local.url if self.local else ""
        context = ssl.create_default_context(cafile=str(self.real.certs["ca"])) if self.real else None
        request = urllib.request.Request(url + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, bytes(response.read())
        except urllib.error.HTTPError as err:
            return err.code, err.read()


@pytest.fixture
def server(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """localkube (the ``kube`` fixture's cluster, namespace ``default``) or the session's real cluster (a
    namespace of the test's own, deleted afterwards)."""
    if backend == "localkube":
        local: LocalKube = request.getfixturevalue("kube")
        yield Server(backend, local.write_kubeconfig(tmp_path / "kubeconfig"), "default", local=local)
        return
    real: RealCluster = request.getfixturevalue("real_cluster")
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    real.create_namespace(namespace)
    try:
        yield Server(backend, real.kubeconfig, namespace, real=real)
    finally:
        real.request("DELETE", f"/api/v1/namespaces/{namespace}")


@pytest.fixture
def ns(server: Server) -> str:
    return server.namespace


@pytest.fixture
def kubeconfig(server: Server) -> Path:
    return server.kubeconfig


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

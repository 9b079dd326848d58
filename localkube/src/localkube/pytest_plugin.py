"""pytest fixtures for tests against localkube, the embedded Kubernetes API.

Installing ``localkube`` registers them with pytest (the ``pytest11`` entry point ``localkube``); nothing to
load by hand:

- ``localkube``: a running cluster (its own loop in a thread, default controllers, scripted runtime) with a
  kubeconfig written to a temporary directory (``localkube.kubeconfig``);
- ``localkube_conn``: the id of an Airflow ``kubernetes`` connection (``kubernetes_default``) pointing at it;
- ``localkube_async``: the same cluster started in the running loop of an async test;
- ``gate_name``: a gate name (``localkube.gates``) of the test's own, opened and forgotten after it, so a
  scripted container still waiting at it ends.

Override ``localkube_runtime`` ("scripted" or "process"), ``localkube_crd_dir`` (a directory of CRD
YAMLs, or a list of them, to serve and validate custom objects against their schemas) or
``localkube_namespaces`` (namespaces to create besides
``default``, ``kube-system``, ``kube-public`` and ``kube-node-lease``) in your own conftest to change how the
cluster starts. As on a real cluster, objects can only be created in namespaces that exist; a test can also
call ``localkube.create_namespaces("team-a")``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from localkube.cluster import LocalKube

CONN_ID = "kubernetes_default"


@pytest.fixture
def gate_name() -> Iterator[str]:
    from localkube.gates import close_gate, open_gate

    name = f"gate-{uuid.uuid4().hex[:8]}"
    yield name
    open_gate(name)  # a container still waiting ends
    close_gate(name)


@pytest.fixture
def localkube_runtime() -> str:
    """The pod runtime of the ``localkube`` fixtures; override to use "process"."""
    return "scripted"


@pytest.fixture
def localkube_crd_dir() -> str | list[str] | None:
    """A directory of CRD YAMLs (or a list of them) to validate against; None serves built-in definitions
    unvalidated."""
    return None


@pytest.fixture
def localkube_namespaces() -> tuple[str, ...]:
    """Namespaces the ``localkube`` fixtures create besides the ones every cluster has."""
    return ()


@pytest.fixture
def localkube(
    localkube_runtime: str,
    localkube_crd_dir: str | list[str] | None,
    localkube_namespaces: tuple[str, ...],
    tmp_path: Path,
) -> Iterator[LocalKube]:
    """A running localkube in a background thread, with ``.kubeconfig`` written under tmp_path."""
    cluster = LocalKube(runtime=localkube_runtime, crd_dir=localkube_crd_dir, namespaces=localkube_namespaces)
    with cluster:
        cluster.write_kubeconfig(tmp_path / "localkube.kubeconfig")
        yield cluster


def connection_json(kubeconfig: Path | str, namespace: str = "default") -> str:
    """The ``AIRFLOW_CONN_...`` value of a ``kubernetes`` connection that uses the kubeconfig."""
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
    )


@pytest.fixture
def localkube_conn(localkube: LocalKube, monkeypatch: pytest.MonkeyPatch) -> str:
    """Points the ``kubernetes_default`` connection at ``localkube`` (restored afterwards); returns its id."""
    assert localkube.kubeconfig is not None
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", connection_json(localkube.kubeconfig))
    return CONN_ID


try:
    import pytest_asyncio
except ImportError:  # the async fixture needs pytest-asyncio; the sync ones do not
    pass
else:

    @pytest_asyncio.fixture
    async def localkube_async(
        localkube_runtime: str,
        localkube_crd_dir: str | list[str] | None,
        localkube_namespaces: tuple[str, ...],
        tmp_path: Path,
    ) -> AsyncIterator[LocalKube]:
        """A localkube running in the test's own event loop (for async tests and triggers)."""
        cluster = LocalKube(
            runtime=localkube_runtime, crd_dir=localkube_crd_dir, namespaces=localkube_namespaces
        )
        async with cluster:
            cluster.write_kubeconfig(tmp_path / "localkube.kubeconfig")
            yield cluster

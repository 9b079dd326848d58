"""The families other than Kubeflow v1 (EDL, both legacy MXNet lineages, T9k, the MPI Operator's v2beta1
MPIJob) on a real API server: their CRDs (tests/fixtures/crds-written, written from the reference documents,
and the MPI Operator's upstream one), reads of a job and its children through the API as admin, gates opened
over the API, and ServiceAccounts bound to a Role.

The cases are tests/operators/families.py's ``CASES`` and ``MPI_OPERATOR_CASE`` (``FAMILY_CASES``); only the
reads differ (the real API instead of the localkube store).
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import threading
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from localkube.controllers.gates import LABEL
from localkube.realcluster import RealCluster

from tests.fixtures import CRDS
from tests.operators.families import CASES, MPI_OPERATOR_CASE, FamilyCase
from tests.operators.harness import in_thread

CRDS_WRITTEN = Path(__file__).resolve().parents[1] / "fixtures" / "crds-written"
# The families' cluster has no Kubeflow v1 CRDs (the main cluster runs those), so it can serve the MPI
# Operator's mpijobs.kubeflow.org, which has the v1 MPIJob's CRD name.
FAMILY_CRD_DIRS = (*sorted(p for p in CRDS_WRITTEN.iterdir() if p.is_dir()), CRDS / "kubeflow.org-v2beta1")
FAMILY_CASES = [*CASES, MPI_OPERATOR_CASE]


def family_crd_dir(directory: Path) -> Path:
    """``directory`` holding a copy of each of ``FAMILY_CRD_DIRS`` (RealCluster installs one directory's)."""
    for source in FAMILY_CRD_DIRS:
        shutil.copytree(source, directory / source.name)
    return directory


# The agent on the families' cluster: every family's operator emulation and gates opened by ConfigMaps.
# kube-controller-manager is the batch Job and ReplicaSet controller there (EDL's and mlkube's children, the
# MPI Operator's launcher Job).
AGENT_ARGS = ("--runtime", "scripted", "--controllers", "edl,mxnet-legacy,t9k,mpi-operator,gates")
CHILD_COLLECTIONS = (
    "/api/v1/{}/pods",
    "/api/v1/{}/services",
    "/apis/batch/v1/{}/jobs",
    "/apis/apps/v1/{}/replicasets",
)


def jobs_path(case: FamilyCase, namespace: str) -> str:
    resource = case.job_kind.resource
    return f"/apis/{resource.group}/{resource.version}/namespaces/{namespace}/{resource.plural}"


def job_or_none(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> dict[str, Any] | None:
    return cluster.get_or_none(f"{jobs_path(case, namespace)}/{name}")


def names(cluster: RealCluster, case: FamilyCase, namespace: str) -> set[str]:
    return {job["metadata"]["name"] for job in cluster.get(jobs_path(case, namespace))["items"]}


def replica_pods(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> list[dict[str, Any]]:
    """The job's replica pods, found as the provider finds them (the kind's selectors and ``owns_pod``)."""
    from airflow_provider_training.hooks.training import replica_selectors

    kind = case.job_kind
    found = {}
    for selector in replica_selectors(kind, name):
        query = urllib.parse.urlencode({"labelSelector": selector})
        for pod in cluster.get(f"/api/v1/namespaces/{namespace}/pods?{query}")["items"]:
            if kind.owns_pod(name, pod):
                found[pod["metadata"]["name"]] = pod
    return list(found.values())


def running(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> bool:
    pods = replica_pods(cluster, case, name, namespace)
    return any((pod.get("status") or {}).get("phase") == "Running" for pod in pods)


def _children(cluster: RealCluster, name: str, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """Every pod, Service, batch Job or ReplicaSet named after the job or labelled with its name, with its
    collection path."""
    found = []
    for collection in CHILD_COLLECTIONS:
        path = collection.format(f"namespaces/{namespace}")
        for obj in cluster.get(path)["items"]:
            meta = obj["metadata"]
            if meta["name"].startswith(f"{name}-") or name in (meta.get("labels") or {}).values():
                found.append((path, obj))
    return found


def leftovers(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> list[str]:
    """The job and every pod, Service, batch Job or ReplicaSet named after it or labelled with its name."""
    found = [f"{case.job_kind.kind} {name}"] if job_or_none(cluster, case, name, namespace) else []
    return found + [
        f"{path.rpartition('/')[2]} {obj['metadata']['name']}"
        for path, obj in _children(cluster, name, namespace)
    ]


def delete_everything(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> None:
    """As admin, delete the job and its children (after a test whose identity could not), and wait until
    they are gone."""
    background = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    paths = [f"{jobs_path(case, namespace)}/{name}"]
    paths += [f"{path}/{obj['metadata']['name']}" for path, obj in _children(cluster, name, namespace)]
    for path in paths:
        try:
            cluster.request("DELETE", path, background)
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
    gone(cluster, case, name, namespace)


def gone(cluster: RealCluster, case: FamilyCase, name: str, namespace: str) -> None:
    """Wait until nothing of the job is left (deletion is graceful on a real server), then check it."""
    with contextlib.suppress(TimeoutError):  # the assertion says what is left
        cluster.wait_for(lambda: not leftovers(cluster, case, name, namespace), 90)
    assert leftovers(cluster, case, name, namespace) == []


def open_gate(cluster: RealCluster, gate: str, namespace: str = "default") -> None:
    """Open a scripted container's gate in the agent (localkube.controllers.gates): a labelled ConfigMap."""
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"gate-{gate}", "namespace": namespace, "labels": {LABEL: "open"}},
        "data": {gate: ""},
    }
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", configmap)


def gate_name(*parts: object) -> str:
    """A gate (and ConfigMap) name from the test's parameters."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(map(str, parts)).lower()).strip("-")


def run_until_logged(
    capsys: pytest.CaptureFixture[str], fn: Callable[[], Any], *steps: tuple[str, Callable[[], None]]
) -> tuple[Any, str]:
    """Run ``fn`` in a thread; each time its output shows the next ``(text, action)``'s text, run that action
    (open a gate, delete the job). Returns ``fn``'s result and all it printed, or raises its error."""
    thread, outcome = in_thread(fn)
    printed: list[str] = []

    def shown(text: str) -> bool:
        printed.append(capsys.readouterr().out)
        return text in "".join(printed) or not thread.is_alive()

    for text, action in steps:
        _poll(functools.partial(shown, text), 120)
        if not thread.is_alive():
            break
        action()
    thread.join(timeout=180)
    printed.append(capsys.readouterr().out)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], "".join(printed)


def _poll(check: Callable[[], bool], timeout: float) -> None:
    """Call ``check`` until it is true or ``timeout`` seconds passed (a synchronisation helper)."""
    pause = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        pause.wait(0.05)

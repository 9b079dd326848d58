"""Kubeflow Trainer v2.3.0's own runtimes and example TrainJobs (tests/fixtures/examples/trainer-v2.3.0,
vendored unchanged) through TrainJobOperator against localkube, which runs them on its Trainer, JobSet and
batch Job controllers under the scripted runtime: each runtime applied and a TrainJob on it run to success,
and each example's TrainJob (after the runtime its file brings) run to success."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localkube.cluster import LocalKube
from localkube.runtime import ANNOTATION

from airflow_provider_training.operators import TrainJobOperator
from tests.fixtures import CRDS, EXAMPLES
from tests.operators.harness import NAMESPACE, in_thread, make_context, run_operator, serve, wait_for

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
TRAINER = EXAMPLES / "trainer-v2.3.0"
RUNTIMES = sorted((TRAINER / "runtimes").glob("*.yaml"))
EXAMPLE_FILES = sorted((TRAINER / "examples").glob("*.yaml"))
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
PLURALS = {"ClusterTrainingRuntime": "clustertrainingruntimes", "TrainingRuntime": "trainingruntimes"}
QUICK = {"duration": 0.05, "logs": ["{pod}: training done"]}
FOREVER = {"duration": None}


@pytest.fixture(scope="module")
def trainer_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    crds = [CRDS / "trainer.kubeflow.org-v1alpha1", CRDS / "jobset.x-k8s.io-v1alpha2"]
    with serve(tmp_path_factory, crd_dir=crds) as kube:
        yield kube


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def apply_runtime(kube: LocalKube, runtime: dict[str, Any]) -> None:
    """Create a (Cluster)TrainingRuntime unless it exists (a module's cluster is shared)."""
    rt = kube.store.resource_type(GROUP, VERSION, PLURALS[runtime["kind"]])
    namespace = "" if runtime["kind"] == "ClusterTrainingRuntime" else NAMESPACE
    if not kube.store.list(
        rt, namespace or None, field_selector=f"metadata.name={runtime['metadata']['name']}"
    ):
        kube.store.create(rt, namespace, runtime)


def script_for(runtime: dict[str, Any]) -> dict[str, Any]:
    """Every replica succeeds at once; where a launcher decides (MPI runtimes), the nodes run until it did."""
    rjobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    if any(r["name"] == "launcher" for r in rjobs):
        return {"default": FOREVER, "launcher": QUICK}
    return {"default": QUICK}


def scripted(job: dict[str, Any], script: dict[str, Any]) -> dict[str, Any]:
    job = copy.deepcopy(job)
    job["metadata"].setdefault("annotations", {})[ANNOTATION] = json.dumps(script)
    return job


def names(kube: LocalKube, rt: Any) -> list[str]:
    return [j["metadata"]["name"] for j in kube.store.list(rt, NAMESPACE)]


def run(job: dict[str, Any]) -> dict[str, Any]:
    return run_operator(
        TrainJobOperator(task_id="train", job=job, check_interval=0.2), make_context(), "sync"
    )


@pytest.mark.parametrize("path", RUNTIMES, ids=lambda p: p.stem)
def test_each_upstream_runtime_runs_a_trainjob_to_success(trainer_cluster: LocalKube, path: Path) -> None:
    (runtime,) = documents(path)
    apply_runtime(trainer_cluster, runtime)
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": f"on-{runtime['metadata']['name']}"},
        "spec": {"runtimeRef": {"name": runtime["metadata"]["name"]}, "trainer": {"numNodes": 2}},
    }

    result = run(scripted(job, script_for(runtime)))

    assert result["state"] == "Succeeded"
    assert result["pods"] and all(pod.startswith(result["name"]) for pod in result["pods"])


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_each_upstream_example_trainjob_runs_to_success(trainer_cluster: LocalKube, path: Path) -> None:
    docs = documents(path)
    for doc in docs:
        if doc["kind"] in PLURALS:
            apply_runtime(trainer_cluster, doc)
    if not any(
        doc["kind"] == "ClusterTrainingRuntime" and doc["metadata"]["name"] == "torch-distributed"
        for doc in docs
    ):
        (torch,) = documents(TRAINER / "runtimes" / "torch_distributed.yaml")
        apply_runtime(trainer_cluster, torch)  # the runtime the release installs, which most examples use
    (job,) = [doc for doc in docs if doc["kind"] == "TrainJob"]
    job = scripted(job, {"default": QUICK})
    if not job["spec"].get("suspend"):
        result = run(job)
    else:  # 03: Kueue admits the job by setting suspend to false
        worker, outcome = in_thread(lambda: run(job))
        rt = trainer_cluster.store.resource_type(GROUP, VERSION, "trainjobs")
        prefix = job["metadata"]["name"]
        name = wait_for(lambda: next((n for n in names(trainer_cluster, rt) if n.startswith(prefix)), None))
        patch = {"spec": {"suspend": False}}
        trainer_cluster.store.patch(rt, NAMESPACE, name, patch, "application/merge-patch+json")
        worker.join()
        assert "error" not in outcome, outcome
        result = outcome["result"]

    assert result["state"] == "Succeeded"
    nodes = int(job["spec"]["trainer"]["numNodes"])
    node_pods = [pod for pod in result["pods"] if "-node-" in pod]
    assert len(node_pods) == nodes  # numNodes became the node Job's completions

"""localkube's Trainer, JobSet and batch Job controllers against the real ones: each TrainJob recorded from
Kubeflow Trainer v2.3.0 and JobSet v0.12.0 on a real kube-apiserver (tests/fixtures/real-trainer, written by
tests/real/test_real_trainer.py) is created again on localkube with upstream's runtimes, and the JobSet and
pods localkube's controllers make of it must be what the real ones made: the JobSet's spec (runtime, runtime
patches, trainer, ML policy env, MPI volumes, JobSet's webhook defaults) and each pod's labels, annotations,
hostname, subdomain, restart policy and containers (image, command, args, env, ports).

What is left out, each for its reason:

- empty objects the real controllers' Go structs serialize (``metadata: {}``, ``resources: {}``): the same
  object to every reader;
- the pod label ``jobset.sigs.k8s.io/priority``, which JobSet's pod admission webhook copies from the
  ``spec.priority`` kube-apiserver's Priority admission plugin sets; localkube has no admission chain.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube

from tests.fixtures import CRDS, EXAMPLES, FIXTURES
from tests.operators.harness import NAMESPACE, serve, wait_for
from tests.operators.test_trainer_examples import GROUP, VERSION, apply_runtime, documents
from tests.real.trainer_real import pod_record, stable_names, without_ids

pytestmark = pytest.mark.timeout(120)
RECORDINGS = sorted((FIXTURES / "real-trainer").glob("*.json"))
RUNTIMES = EXAMPLES / "trainer-v2.3.0" / "runtimes"
PRIORITY = "jobset.sigs.k8s.io/priority"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    crds = [CRDS / "trainer.kubeflow.org-v1alpha1", CRDS / "jobset.x-k8s.io-v1alpha2"]
    with serve(tmp_path_factory, crd_dir=crds) as kube:
        for runtime in ("torch_distributed", "deepspeed_distributed"):
            (document,) = documents(RUNTIMES / f"{runtime}.yaml")
            apply_runtime(kube, document)
        yield kube


def job_name(recording: dict[str, Any]) -> str:
    """The recorded TrainJob's name: its JobSet's pods are ``<job>-<replicated job>-<i>-<j>-``."""
    prefixes = {pod["generateName"] for pod in recording["pods"].values()}
    (name,) = {p.rsplit("-", 4)[0] for p in prefixes}
    return name


def without_empty(value: Any) -> Any:
    """``value`` without empty objects (Go's serialization of empty structs)."""
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v != {}}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def comparable_pod(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["labels"].pop(PRIORITY, None)
    return pod


def made_by_localkube(kube: LocalKube, name: str, spec: dict[str, Any], pods: int) -> dict[str, Any]:
    """Create the TrainJob; the JobSet localkube's controllers make of it and its first ``pods`` pods, as
    the recording holds them."""
    trainjobs = kube.store.resource_type(GROUP, VERSION, "trainjobs")
    job = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name}}
    kube.store.create(trainjobs, NAMESPACE, {**job, "spec": copy.deepcopy(spec)})
    jobsets = kube.store.resource_type("jobset.x-k8s.io", "v1alpha2", "jobsets")
    field = f"metadata.name={name}"
    jobset = wait_for(lambda: next(iter(kube.store.list(jobsets, NAMESPACE, field_selector=field)), None))
    pod_type = kube.store.resource_type("", "v1", "pods")
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"

    def enough() -> list[dict[str, Any]] | None:
        found = kube.store.list(pod_type, NAMESPACE, label_selector=selector)
        return found if len(found) >= pods else None

    found = {pod["metadata"]["name"]: pod for pod in wait_for(enough)}
    records = {name: pod_record(pod) for name, pod in found.items()}
    return {"jobset": without_ids(jobset["spec"]), "pods": stable_names(records, found)}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_localkube_makes_what_the_real_trainer_and_jobset_made(cluster: LocalKube, path: Path) -> None:
    recording = json.loads(path.read_text())
    name = job_name(recording)

    made = made_by_localkube(cluster, name, recording["trainjob"]["spec"], len(recording["pods"]))

    assert without_empty(made["jobset"]) == without_empty(recording["jobset"]["spec"])
    assert set(made["pods"]) == set(recording["pods"])
    for pod, real in recording["pods"].items():
        assert comparable_pod(made["pods"][pod]) == comparable_pod(without_empty(real)), pod


def test_the_comparison_sees_a_difference() -> None:
    """The normalizations leave real differences visible: an env var's value, a label."""
    recording = json.loads(RECORDINGS[0].read_text())
    real = next(iter(recording["pods"].values()))
    changed = copy.deepcopy(real)
    changed["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    relabelled = copy.deepcopy(real)
    relabelled["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = "other"
    assert comparable_pod(changed) != comparable_pod(real)
    assert comparable_pod(relabelled) != comparable_pod(real)
    assert without_empty({"a": {}, "b": [{"c": {}}]}) == {"b": [{}]}

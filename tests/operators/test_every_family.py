"""The generic operator and trigger know no family: every upstream example of every registered family runs
to success through the deferrable path (a T9k debug-mode job, which never succeeds, is refused up front).

The cluster also serves the MPI Operator's ``kubeflow.org/v2beta1`` MPIJob (its CRD loaded beside the v1
MPIJob that localkube serves built in; a real cluster serves one of the two), so its examples run too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from localkube.cluster import LocalKube

from airflow_provider_training.operators import TrainingJobOperator
from airflow_provider_training.specs import SpecError
from tests.fixtures import CRDS, examples
from tests.operators.harness import make_context, run_operator, serve

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
FILES = examples()
# Long enough for the wait to see the pods: v1alpha1 MXJob deletes them as soon as the chief is done.
QUICK = json.dumps({"default": {"duration": 0.5, "logs": ["replica says hello"]}})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    with serve(tmp_path_factory, crd_dir=CRDS / "kubeflow.org-v2beta1") as kube:
        yield kube


def example(path: Path) -> dict:
    job = next(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    meta = job.setdefault("metadata", {})
    meta.pop("namespace", None)
    meta["name"] = path.stem.lower().replace("_", "-")  # upstream's pi, pi-intel and pi-mpich are all "pi"
    meta.setdefault("annotations", {})["localkube.dev/script"] = QUICK
    return job


@pytest.mark.parametrize("path", [f for f in FILES if "debug" not in f.name], ids=lambda p: p.stem)
def test_upstream_example_succeeds(cluster, path, capsys):
    job = example(path)
    op = TrainingJobOperator(task_id="train", job=job, check_interval=0.2, log_replicas="all")

    result = run_operator(op, make_context(), "deferrable")

    assert result["state"] == "Succeeded" and result["kind"] == job["kind"]
    assert result["pods"]
    assert "replica says hello" in capsys.readouterr().out


def test_a_target_the_job_can_never_reach_is_refused_before_any_request(cluster):
    path = next(f for f in FILES if "debug" in f.name)
    requests = len(cluster.requests)

    with pytest.raises(SpecError, match="debug"):
        TrainingJobOperator(task_id="train", job=example(path)).execute(make_context())

    assert len(cluster.requests) == requests

"""Every upstream kubeflow.org/v1 example manifest loads unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airflow_provider_training.specs import load_job, parse_job
from tests.fixtures import EXAMPLES, examples

FILES = examples("kubeflow-v1")


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_upstream_example_loads_unchanged(path: Path):
    original = yaml.safe_load(path.read_text())
    assert load_job(path) == original
    assert load_job(str(path)) == original
    assert load_job(path.read_text()) == original


def test_examples_cover_every_kind_but_jax():
    kinds = {yaml.safe_load(path.read_text())["kind"] for path in FILES}
    assert kinds >= {"TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "PaddleJob", "MPIJob"}


def test_example_models_know_their_replicas():
    model = parse_job(EXAMPLES / "kubeflow-v1" / "mpi_tensorflow-mnist.yaml")
    assert [(r.type, r.count, r.indexed) for r in model.replicas()] == [
        ("Launcher", 1, False),
        ("Worker", 2, True),
    ]
    assert model.name_limit() == 63 - len("-worker-1")

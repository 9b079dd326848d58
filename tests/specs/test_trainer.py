"""The TrainJob spec model: what it fills in, what it refuses (naming the field), and that what it accepts the
installed v2.3.0 CRD (tests/fixtures/crds) accepts too."""

from __future__ import annotations

from typing import Any

import pytest
from localkube.schema import SchemaRegistry

from airflow_provider_training.specs import SpecError, load_job
from tests.fixtures import CRDS

API = "trainer.kubeflow.org/v1alpha1"


def train_job(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TrainJob", "metadata": {"name": "mnist"}, "spec": spec}


def errors_of(job: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as failure:
        load_job(job)
    return failure.value.errors


def test_runtime_ref_defaults_to_a_cluster_training_runtime():
    manifest = load_job(train_job(runtimeRef={"name": "torch-distributed"}))

    assert manifest["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }


def test_a_full_spec_passes_through_with_its_json_keys():
    spec = {
        "runtimeRef": {"name": "torch-custom", "kind": "TrainingRuntime"},
        "initializer": {
            "dataset": {"storageUri": "hf://tatsu-lab/alpaca", "secretRef": {"name": "hf-token"}},
            "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B", "env": [{"name": "A", "value": "1"}]},
        },
        "trainer": {
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["torchrun", "train.py"],
            "args": ["--epochs", "1"],
            "env": [{"name": "LR", "value": "0.1"}],
            "numNodes": 2,
            "resourcesPerNode": {"limits": {"cpu": "1"}},
            "numProcPerNode": 2,
        },
        "suspend": False,
        "activeDeadlineSeconds": 3600,
    }

    assert load_job(train_job(**spec))["spec"] == {
        **spec,
        "runtimeRef": {**spec["runtimeRef"], "apiGroup": "trainer.kubeflow.org"},
    }


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        ({}, "spec.runtimeRef", "required"),
        ({"runtimeRef": {}}, "spec.runtimeRef.name", "required"),
        ({"runtimeRef": {"name": "x", "kind": "Runtime"}}, "spec.runtimeRef.kind", "'TrainingRuntime'"),
        ({"runtimeRef": {"name": "x", "apiGroup": "kubeflow.org"}}, "spec.runtimeRef.apiGroup", "trainer"),
        ({"runtimeRef": {"name": "x"}, "trainer": {"numNodes": 0}}, "spec.trainer.numNodes", "1"),
        ({"runtimeRef": {"name": "x"}, "trainer": {"image": 7}}, "spec.trainer.image", "string"),
        ({"runtimeRef": {"name": "x"}, "trainer": {"nodes": 2}}, "spec.trainer.nodes", "unknown field"),
        ({"runtimeRef": {"name": "x"}, "suspend": "yes"}, "spec.suspend", "bool"),
        ({"runtimeRef": {"name": "x"}, "activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds", "1"),
    ],
)
def test_bad_input_names_the_field(spec, field, text):
    found = dict(errors_of(train_job(**spec)))

    assert field in found and text in found[field]


def test_num_proc_per_node_takes_a_number_or_the_pre_v22_words():
    for value in (1, 8, "auto", "cpu", "gpu"):
        load_job(train_job(runtimeRef={"name": "x"}, trainer={"numProcPerNode": value}))
    assert any(
        path.startswith("spec.trainer.numProcPerNode")
        for path, _ in errors_of(train_job(runtimeRef={"name": "x"}, trainer={"numProcPerNode": "many"}))
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"podSpecOverrides": [{"targetJobs": [{"name": "node"}]}]},  # v2.0
        {"podTemplateOverrides": [{"targetJobs": [{"name": "node"}]}], "labels": {"team": "a"}},  # v2.1
        {"runtimePatches": [{"manager": "me"}], "activeDeadlineSeconds": 60},  # v2.2+
    ],
)
def test_each_releases_overrides_are_accepted(overrides):
    assert load_job(train_job(runtimeRef={"name": "x"}, **overrides))["spec"].keys() >= overrides.keys()


def test_fields_of_two_releases_are_refused():
    errors = errors_of(
        train_job(
            runtimeRef={"name": "x"},
            podTemplateOverrides=[{}],
            runtimePatches=[{}],
            annotations={"a": "b"},
        )
    )

    assert errors == [
        (
            "spec",
            "mixes fields of different Trainer releases (v2.1: podTemplateOverrides; v2.2+: runtimePatches): "
            "write one release's",
        ),
        ("spec.annotations", "not in Trainer v2.2+ (which has runtimePatches): use runtimePatches"),
    ]


def test_the_name_leaves_room_for_the_jobsets_job_names():
    ok = "a" * (63 - len("-dataset-initializer-0"))

    load_job({**train_job(runtimeRef={"name": "x"}), "metadata": {"name": ok}})
    assert dict(errors_of({**train_job(runtimeRef={"name": "x"}), "metadata": {"name": ok + "b"}}))[
        "metadata.name"
    ].startswith("must be at most 41 characters")


def test_what_the_model_accepts_the_installed_crd_accepts_unchanged():
    """Schema and pruning of trainer.kubeflow.org v2.3.0: nothing the model sends is dropped or refused; the
    CRD only adds its defaults."""
    registry = SchemaRegistry.from_dir(CRDS / "trainer.kubeflow.org-v1alpha1")
    manifest = load_job(
        train_job(
            runtimeRef={"name": "torch-distributed"},
            initializer={"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}},
            trainer={"image": "busybox", "command": ["train"], "numNodes": 2, "numProcPerNode": 1},
            activeDeadlineSeconds=600,
        )
    )

    checked = registry.validate_and_prune("trainer.kubeflow.org", "v1alpha1", "trainjobs", manifest)

    defaults = {"managedBy": "trainer.kubeflow.org/trainjob-controller", "suspend": False}
    assert checked["spec"] == {**manifest["spec"], **defaults}

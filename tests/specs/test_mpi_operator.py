"""The MPI Operator's v2beta1 MPIJob spec model: the controller's validation rules checked before submit,
bad input refused naming the field, and what the model accepts the installed CRD (tests/fixtures/crds)
accepts unchanged."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from localkube.schema import SchemaRegistry

from airflow_provider_training.specs import SpecError, load_job
from tests.fixtures import CRDS, examples
from tests.specs.helpers import missing

CONTAINER = {"name": "mpi-launcher", "image": "mpioperator/mpi-pi:openmpi", "command": ["mpirun"]}
PI: dict[str, Any] = {  # the shape of upstream examples/v2beta1/pi/pi.yaml
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi"},
    "spec": {
        "slotsPerWorker": 1,
        "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60},
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{**CONTAINER, "name": "w"}]}}},
        },
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    job = copy.deepcopy(PI)
    job["spec"].update(changes)
    return job


def errors_of(job: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as failure:
        load_job(job)
    return dict(failure.value.errors)


def test_the_upstream_example_loads_as_the_v2beta1_kind_with_any_container_names():
    manifest = load_job(PI)

    assert (manifest["apiVersion"], manifest["spec"]) == ("kubeflow.org/v2beta1", PI["spec"])


@pytest.mark.parametrize("path", examples("mpi-operator"), ids=lambda path: path.stem)
def test_every_upstream_example_loads_unchanged_and_the_installed_crd_keeps_all_of_it(path: Path):
    original = yaml.safe_load(path.read_text())
    registry = SchemaRegistry.from_dir(CRDS / "kubeflow.org-v2beta1")

    manifest = load_job(path)

    assert manifest == original
    assert (
        missing(original, registry.validate_and_prune("kubeflow.org", "v2beta1", "mpijobs", manifest)) == []
    )


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"slotsPerWorker": 0}, "spec.slotsPerWorker", "greater than or equal to 1"),
        ({"launcherCreationPolicy": "Later"}, "spec.launcherCreationPolicy", "AtStartup"),
        ({"mpiImplementation": "MVAPICH"}, "spec.mpiImplementation", "MPICH"),
        (
            {"runPolicy": {"managedBy": "kubeflow.org/training-operator"}},
            "spec.runPolicy.managedBy",
            "mpi-operator",
        ),
        ({"mainContainer": "mpi"}, "spec.mainContainer", ""),  # a v1 field the v2beta1 CRD would prune
    ],
)
def test_bad_input_names_the_field(changes, field, text):
    assert text in errors_of(with_spec(**changes))[field]


def test_the_controllers_replica_rules():
    job = with_spec()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    job["spec"]["mpiReplicaSpecs"]["Worker"].pop("replicas")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    errors = errors_of(job)
    assert errors["spec.mpiReplicaSpecs.Launcher.replicas"] == "must be exactly 1 for Launcher (got 2)"
    assert "the operator's default, 0, is refused" in errors["spec.mpiReplicaSpecs.Worker.replicas"]
    assert errors["spec.mpiReplicaSpecs.Worker.restartPolicy"] == "must be Never or OnFailure (got Always)"

    del job["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert "required" in errors_of(job)["spec.mpiReplicaSpecs.Launcher"]


def test_the_name_leaves_room_for_the_last_workers_pod():
    long_name = {**PI, "metadata": {"name": "a" * (63 - len("-launcher") + 1)}}
    assert errors_of(long_name)["metadata.name"].startswith("must be at most 54 characters")


def test_what_the_model_accepts_the_installed_crd_accepts_unchanged():
    registry = SchemaRegistry.from_dir(CRDS / "kubeflow.org-v2beta1")
    job = with_spec(
        runLauncherAsWorker=True, launcherCreationPolicy="WaitForWorkersReady", mpiImplementation="Intel"
    )
    job["spec"]["runPolicy"].update(suspend=True, managedBy="kueue.x-k8s.io/multikueue", backoffLimit=2)
    manifest = load_job(job)

    checked = registry.validate_and_prune("kubeflow.org", "v2beta1", "mpijobs", manifest)

    assert checked["spec"] == manifest["spec"]

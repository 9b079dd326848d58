"""T9k spec models: the upstream tutorial examples load unchanged; bad specs name the field and its values."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_training.kinds import get_kind
from airflow_provider_training.specs import build_job, load_job, model_for, parse_job
from airflow_provider_training.specs.tensorstack import PyTorchTrainingJob, TensorFlowTrainingJob
from tests.fixtures import examples
from tests.specs.helpers import container, refused

FILES = examples("t9k")
API = "batch.tensorstack.dev/v1beta1"


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_upstream_example_loads_unchanged(path: Path):
    original = yaml.safe_load(path.read_text())
    assert load_job(path) == original
    assert load_job(path.read_text()) == original


def entry(type_: str, replicas: int | None = 1, name: str = "tensorflow", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": type_, "template": {"spec": {"containers": [container(name)]}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def t9k(kind: str, *entries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": "train"},
        "spec": {"replicaSpecs": list(entries), **spec},
    }


def tf(*entries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return t9k("TensorFlowTrainingJob", *(entries or (entry("worker", 2),)), **spec)


def test_full_tensorflow_spec_round_trips():
    job = tf(
        entry("chief", 1, restartPolicy="ExitCode"),
        entry("ps", 2),
        entry("worker", 4, restartPolicy="OnFailure"),
        runMode={
            "pause": {
                "enabled": False,
                "resumeSpecs": [{"type": "worker", "command": ["python"], "args": ["a"]}],
            }
        },
        runPolicy={"activeDeadlineSeconds": 3600, "backoffLimit": 3, "cleanUpPolicy": "Unfinished"},
        scheduler={"t9kScheduler": {"queue": "default", "priority": 50}},
        tensorboardSpec={
            "image": "t9kpublic/tensorflow-2.11.0:cpu-sdk-0.5.2",
            "trainingLogFilesets": ["t9k://pvc/x/log"],
        },
    )
    assert load_job(copy.deepcopy(job)) == job
    model = parse_job(job)
    assert isinstance(model, TensorFlowTrainingJob)
    assert [(r.path, r.type, r.count) for r in model.replicas()] == [
        ("spec.replicaSpecs[0]", "chief", 1),
        ("spec.replicaSpecs[1]", "ps", 2),
        ("spec.replicaSpecs[2]", "worker", 4),
    ]
    assert model.name_limit() == 63 - len("-worker-3")


def test_wrong_clean_up_policy_names_the_allowed_values():
    refused(
        tf(runPolicy={"cleanUpPolicy": "Running"}),
        "spec.runPolicy.cleanUpPolicy",
        "'None', 'All' or 'Unfinished'",
        "'Running'",
    )


def test_wrong_replica_type_names_the_allowed_types():
    refused(
        tf(entry("Worker", 2)),
        "spec.replicaSpecs[0]",
        "unknown replica type 'Worker'",
        "chief, worker, ps, evaluator",
    )


def test_missing_main_container():
    refused(
        tf(entry("worker", 2, name="main")), "spec.replicaSpecs[0].template.spec.containers", "'tensorflow'"
    )
    no_containers = tf({"type": "worker", "replicas": 1, "template": {"spec": {}}})
    refused(no_containers, "spec.replicaSpecs[0].template.spec.containers", "at least one container")


def test_duplicate_types_and_chief_count():
    refused(
        tf(entry("worker", 1), entry("worker", 2)),
        "spec.replicaSpecs[1].type",
        "already defined at spec.replicaSpecs[0]",
    )
    refused(tf(entry("chief", 2)), "spec.replicaSpecs[0].replicas", "must be exactly 1 for chief")


def test_run_mode_overrides_must_name_the_jobs_types():
    debug = {"debug": {"enabled": True, "replicaSpecs": [{"type": "master", "command": ["sleep", "inf"]}]}}
    refused(
        tf(runMode=debug),
        "spec.runMode.debug.replicaSpecs[0].type",
        "must be a replica type of this job: worker",
    )
    refused(
        tf(runMode={"pause": {"enabled": True, "resume": []}}),
        "spec.runMode.pause.resume",
        "allowed: enable, enabled, resumeSpecs",
    )


def test_scheduler_priority_range():
    refused(
        tf(scheduler={"t9kScheduler": {"queue": "q", "priority": 101}}),
        "spec.scheduler.t9kScheduler.priority",
        "100",
    )


def test_pytorch_takes_free_type_names_and_any_container_name():
    job = t9k("PyTorchTrainingJob", entry("node", 2, name="pytorch"), entry("launcher-x", 1, name="main"))
    assert load_job(copy.deepcopy(job)) == job
    assert isinstance(parse_job(job), PyTorchTrainingJob)


def test_pytorch_elastic_needs_torchrun_and_ordered_bounds():
    elastic = {"enabled": True, "minReplicas": 4, "maxReplicas": 2, "expectedReplicas": 8}
    job = t9k("PyTorchTrainingJob", entry("worker", 2, name="pytorch"), elastic=elastic)
    refused(job, "spec.torchrunConfig.enabled", "must be true")
    refused(job, "spec.elastic.maxReplicas", "at least minReplicas 4")
    refused(job, "spec.elastic.expectedReplicas", "between minReplicas and maxReplicas")
    ok = t9k(
        "PyTorchTrainingJob",
        entry("worker", 2, name="pytorch"),
        torchrunConfig={"enabled": True, "procPerNode": 4, "rdzvBackend": "c10d"},
        elastic={"enabled": True, "minReplicas": 1, "maxReplicas": 4, "expectedReplicas": 2},
    )
    assert load_job(ok)["spec"]["torchrunConfig"]["procPerNode"] == "4"


def test_pytorch_proc_per_node_and_backend():
    bad = t9k(
        "PyTorchTrainingJob",
        entry("worker", 1, name="pytorch"),
        torchrunConfig={"enabled": True, "procPerNode": "all"},
    )
    refused(bad, "spec.torchrunConfig.procPerNode", "a number or 'gpu'")
    bad = t9k(
        "PyTorchTrainingJob", entry("worker", 1, name="pytorch"), torchrunConfig={"rdzvBackend": "static"}
    )
    refused(bad, "spec.torchrunConfig.rdzvBackend", "'c10d', 'etcd' or 'etcd-v2'")


def test_xgboost_needs_exactly_one_master():
    worker_only = t9k("XGBoostTrainingJob", entry("worker", 2, name="xgboost"))
    refused(worker_only, "spec.replicaSpecs", "type 'master'")
    two = t9k("XGBoostTrainingJob", entry("master", 2, name="xgboost"))
    refused(two, "spec.replicaSpecs[0].replicas", "exactly 1 for master")
    refused(
        t9k("XGBoostTrainingJob", entry("master", 1)),
        "spec.replicaSpecs[0].template.spec.containers",
        "'xgboost'",
    )


def test_xgboost_has_no_tensorboard():
    job = t9k("XGBoostTrainingJob", entry("master", 1, name="xgboost"), tensorboardSpec={"image": "x"})
    refused(job, "spec.tensorboardSpec", "unknown field")


def test_kinds_without_a_model_pass_through():
    job = {
        "apiVersion": API,
        "kind": "DeepSpeedJob",
        "metadata": {"name": "gpt"},
        "spec": {"worker": {"replicas": 2}, "config": {"run": {"python": ["train.py"]}}},
    }
    assert load_job(job) == job
    mpi = {
        "apiVersion": API,
        "kind": "MPIJob",
        "metadata": {"name": "mpi"},
        "spec": {"worker": {"replicas": 2}},
    }
    assert load_job(mpi) == mpi
    kubeflow = {**mpi, "apiVersion": "kubeflow.org/v1", "spec": {"mpiReplicaSpecs": {}}}
    assert model_for(get_kind("MPIJob", API)) is not model_for(get_kind("MPIJob"))
    refused(kubeflow, "spec", "at least one replica")


def test_builder_packs_the_replica_list():
    job = build_job(
        "TensorFlowTrainingJob", "tf:2", ["python", "train.py"], {"chief": 1, "worker": 2}, name="tf-built"
    )
    assert job["spec"]["replicaSpecs"] == [
        {
            "type": "chief",
            "replicas": 1,
            "template": {
                "spec": {
                    "containers": [{"name": "tensorflow", "image": "tf:2", "command": ["python", "train.py"]}]
                }
            },
        },
        {
            "type": "worker",
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [{"name": "tensorflow", "image": "tf:2", "command": ["python", "train.py"]}]
                }
            },
        },
    ]
    assert job["apiVersion"] == API
    with pytest.raises(ValueError, match="write its manifest"):
        build_job(get_kind("DeepSpeedJob"), "ds", ["deepspeed"])

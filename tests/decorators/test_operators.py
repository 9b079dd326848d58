"""The jobs the decorated operators build, and the parameters they refuse before anything is submitted.

``@task.train_job`` runs end to end once localkube has a Trainer controller; here, its manifest (validated
by the TrainJob spec model) and its refusals."""

from __future__ import annotations

import base64
import json
from datetime import datetime

import pytest
from airflow.sdk import DAG, task

from airflow_provider_training.decorators.shipping import BOOTSTRAP, PAYLOAD_ENV, FunctionNotShippable
from airflow_provider_training.specs import load_job, pytorch_job

START = datetime(2026, 1, 1)


def train(lr: float, epochs: int = 2) -> dict:
    import os

    return {"rank": os.environ.get("PET_NODE_RANK"), "lr": lr, "epochs": epochs}


def make(decorator, **kwargs):
    """The operator that calling the decorated ``train`` makes in a DAG."""
    with DAG("decorators_unit", schedule=None, start_date=START) as dag:
        decorator(**kwargs)(train)(0.1)
    return dag.get_task("train")


def shipped(container_env: list[dict]) -> dict:
    (entry,) = [e for e in container_env if e["name"] == PAYLOAD_ENV]
    return json.loads(base64.b64decode(entry["value"]))


def test_train_job_builds_a_trainjob_whose_nodes_run_the_function():
    op = make(
        task.train_job,
        runtime="torch-distributed",
        num_nodes=3,
        image="python:3.11-slim",
        env={"DATA": "/data"},
        trainer={"resourcesPerNode": {"limits": {"cpu": "1"}}},
    )

    manifest = load_job(op.job_for("cGF5bG9hZA=="), kind="TrainJob")  # the spec model accepts it

    assert manifest["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = manifest["spec"]["trainer"]
    assert trainer["command"] == ["python", "-c", BOOTSTRAP] and "args" not in trainer
    assert trainer["numNodes"] == 3 and trainer["image"] == "python:3.11-slim"
    assert trainer["resourcesPerNode"] == {"limits": {"cpu": "1"}}
    ours = {"name": PAYLOAD_ENV, "value": "cGF5bG9hZA=="}
    assert trainer["env"] == [{"name": "DATA", "value": "/data"}, ours]
    assert op.rank_env == ("PET_NODE_RANK", "JOB_COMPLETION_INDEX")  # node 0 decides


def test_the_job_ships_the_arguments_as_rendered():
    """What ``execute`` submits once the arguments are rendered (the submission itself is
    TrainingJobOperator's, run on localkube in test_run.py)."""
    op = make(task.train_job, runtime="torch-distributed")
    op.op_kwargs = {"epochs": 5}  # as rendered

    job = op.shipped_job()

    body = shipped(job["spec"]["trainer"]["env"])
    assert body["name"] == "train" and body["args"] == [0.1] and body["kwargs"] == {"epochs": 5}
    assert body["source"].startswith("def train(lr: float, epochs: int = 2) -> dict:\n")
    assert body["rank_env"] == ["PET_NODE_RANK", "JOB_COMPLETION_INDEX"]
    assert "numNodes" not in job["spec"]["trainer"]  # the runtime's
    op.op_kwargs = {"epochs": {5}}
    with pytest.raises(FunctionNotShippable, match="argument 'epochs' is not JSON-serializable"):
        op.shipped_job()


def test_pytorch_job_builds_a_master_and_workers_that_keep_their_pods():
    op = make(task.pytorch_job, image="python:3.11-slim", workers=2, env=[{"name": "A", "value": "1"}])

    manifest = op.job_for("cGF5bG9hZA==")

    specs = manifest["spec"]["pytorchReplicaSpecs"]
    ours = {"name": PAYLOAD_ENV, "value": "cGF5bG9hZA=="}
    assert {t: s["replicas"] for t, s in specs.items()} == {"Master": 1, "Worker": 2}
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["command"] == ["python", "-c", BOOTSTRAP]
        assert container["env"] == [{"name": "A", "value": "1"}, ours]
        assert spec["restartPolicy"] == "Never"  # an exception fails the job at once
    assert manifest["spec"]["runPolicy"]["cleanPodPolicy"] == "None"  # the Master's log outlives the job
    built = pytorch_job(image="python:3.11-slim", command=["python"], workers=2)["spec"][
        "pytorchReplicaSpecs"
    ]
    assert {spec["restartPolicy"] for spec in [*specs.values(), *built.values()]} == {
        "Never"
    }  # the builder's
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 3  # as every builder's, for OnFailure
    assert op.rank_env == ("RANK",)


@pytest.mark.parametrize(
    ("decorator", "kwargs", "message"),
    [
        (task.pytorch_job, {"image": ""}, "image"),
        (task.pytorch_job, {"image": "i", "workers": -1}, "workers must be a whole number >= 0"),
        (task.pytorch_job, {"image": "i", "workers": True}, "workers must be a whole number >= 0"),
        (task.pytorch_job, {"image": "i", "run_policy": {"cleanPodPolicy": "All"}}, 'cleanPodPolicy "All"'),
        (task.pytorch_job, {"image": "i", "wait_until": "Running"}, 'wait_until must be "Succeeded"'),
        (task.pytorch_job, {"image": "i", "env": {PAYLOAD_ENV: "x"}}, f"env must not set {PAYLOAD_ENV}"),
        (task.pytorch_job, {"image": "i", "env": "A=1"}, "env must be a mapping"),
        (task.train_job, {}, "runtime"),
        (task.train_job, {"runtime": "r", "num_nodes": 0}, "num_nodes must be a whole number >= 1"),
        (task.train_job, {"runtime": "r", "image": ""}, "image must be a non-empty string"),
        (task.train_job, {"runtime": "r", "trainer": {"command": ["x"]}}, "trainer must not set command"),
        (task.train_job, {"runtime": "r", "job": {}}, "builds the TrainJob: pass runtime, not job"),
        (task.train_job, {"runtime": "r", "wait_until": None}, 'wait_until must be "Succeeded"'),
    ],
)
def test_bad_parameters_are_refused_where_the_task_is_made(decorator, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make(decorator, **kwargs)


@pytest.mark.parametrize("decorator", [task.pytorch_job, task.train_job])
def test_an_unshippable_function_is_refused_where_it_is_decorated(decorator):
    factor = 2

    def closure(x):
        return x * factor

    with pytest.raises(FunctionNotShippable, match=r"closure\(\) is a closure over 'factor'"):
        decorator(image="i", runtime="r")(closure)

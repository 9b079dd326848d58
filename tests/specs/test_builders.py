"""The builders give valid manifests for the common case."""

from __future__ import annotations

import pytest

from airflow_provider_training.kinds import get_kind
from airflow_provider_training.specs import (
    SpecError,
    build_job,
    jax_job,
    job_name_limit,
    mpi_job,
    mx_job,
    paddle_job,
    pytorch_job,
    tf_job,
    xgboost_job,
)


def containers(job, key, type_):
    return job["spec"][key][type_]["template"]["spec"]["containers"]


def test_pytorch_job():
    job = pytorch_job(
        name="mnist",
        namespace="ml",
        image="pytorch:2",
        command=["torchrun", "train.py"],
        args=["--epochs", "1"],
        workers=3,
        env={"EPOCHS": 1},
        resources={"limits": {"nvidia.com/gpu": 1}},
        labels={"team": "ml"},
        nproc_per_node=2,
        restart_policy="OnFailure",
        run_policy={"cleanPodPolicy": "None", "backoffLimit": 2},
    )
    assert job["metadata"] == {"name": "mnist", "namespace": "ml", "labels": {"team": "ml"}}
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {t: (s["replicas"], s["restartPolicy"]) for t, s in specs.items()} == {
        "Master": (1, "OnFailure"),
        "Worker": (3, "OnFailure"),
    }
    assert containers(job, "pytorchReplicaSpecs", "Worker") == [
        {
            "name": "pytorch",
            "image": "pytorch:2",
            "command": ["torchrun", "train.py"],
            "args": ["--epochs", "1"],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "env": [{"name": "EPOCHS", "value": "1"}],
        }
    ]
    assert job["spec"]["nprocPerNode"] == "2"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 2}


def test_pytorch_job_without_master_and_without_name():
    job = pytorch_job(image="img", command="python", master=0, workers=1)
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["metadata"] == {}
    assert containers(job, "pytorchReplicaSpecs", "Worker")[0]["command"] == ["python"]


def test_builder_checks_the_operator_rules():
    with pytest.raises(SpecError, match=r"Master\.replicas: must be exactly 1 for Master \(got 2\)"):
        pytorch_job(image="img", master=2)


def test_client_objects_are_converted():
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1ResourceRequirements, V1SecretKeySelector

    secret = V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="s", key="token"))
    job = tf_job(
        image="tf:2",
        workers=2,
        ps=1,
        env=[V1EnvVar(name="TOKEN", value_from=secret)],
        resources=V1ResourceRequirements(requests={"cpu": "2"}),
    )
    assert list(job["spec"]["tfReplicaSpecs"]) == ["PS", "Worker"]
    (container,) = containers(job, "tfReplicaSpecs", "PS")
    assert container["env"] == [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}
    ]
    assert container["resources"] == {"requests": {"cpu": "2"}}


def test_mpi_job_runs_the_command_on_the_launcher_only():
    job = mpi_job(
        image="horovod", command=["mpirun", "-np", "4", "python", "t.py"], workers=4, slots_per_worker=1
    )
    assert containers(job, "mpiReplicaSpecs", "Launcher")[0]["command"][0] == "mpirun"
    assert "command" not in containers(job, "mpiReplicaSpecs", "Worker")[0]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert job["spec"]["slotsPerWorker"] == 1


def test_mpi_job_builds_the_mpi_operators_v2beta1_kind_and_checks_its_rules():
    job = mpi_job(
        image="mpioperator/mpi-pi:openmpi",
        command=["mpirun", "-n", "2", "/home/mpiuser/pi"],
        api_version="kubeflow.org/v2beta1",
        spec={"launcherCreationPolicy": "WaitForWorkersReady"},
    )
    assert (job["apiVersion"], job["spec"]["launcherCreationPolicy"]) == (
        "kubeflow.org/v2beta1",
        "WaitForWorkersReady",
    )
    assert containers(job, "mpiReplicaSpecs", "Launcher")[0]["command"][0] == "mpirun"

    with pytest.raises(SpecError, match=r"spec\.launcherCreationPolicy"):  # a v2beta1 field, checked
        mpi_job(image="img", api_version="kubeflow.org/v2beta1", spec={"launcherCreationPolicy": "Later"})
    with pytest.raises(SpecError, match=r"spec\.launcherCreationPolicy"):  # not a v1 field
        mpi_job(image="img", spec={"launcherCreationPolicy": "AtStartup"})


@pytest.mark.parametrize(
    ("builder", "key", "types", "container"),
    [
        (xgboost_job, "xgbReplicaSpecs", ["Master", "Worker"], "xgboost"),
        (paddle_job, "paddleReplicaSpecs", ["Worker"], "paddle"),
        (jax_job, "jaxReplicaSpecs", ["Worker"], "jax"),
        (mx_job, "mxReplicaSpecs", ["Scheduler", "Server", "Worker"], "mxnet"),
    ],
)
def test_other_builders(builder, key, types, container):
    job = builder(image="img", command=["run"])
    assert list(job["spec"][key]) == types
    assert containers(job, key, types[0])[0]["name"] == container


def test_mx_job_mode():
    assert mx_job(image="img", job_mode="MXTune")["spec"]["jobMode"] == "MXTune"


def test_generic_builder_with_extra_pod_and_container_fields():
    job = build_job(
        "JAXJob",
        "jax:0.4",
        ["python", "-m", "train"],
        {"Worker": 4},
        container={"imagePullPolicy": "Always", "ports": [{"containerPort": 6666, "name": "jaxjob-port"}]},
        pod_spec={"nodeSelector": {"pool": "tpu"}},
        restart_policy="ExitCode",
    )
    worker = job["spec"]["jaxReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode"
    assert worker["template"]["spec"]["nodeSelector"] == {"pool": "tpu"}
    assert worker["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"


def test_generic_builder_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown training job kind 'TorchJob'"):
        build_job("TorchJob", "img")


def test_job_name_limit_follows_the_replica_counts():
    assert job_name_limit(pytorch_job(image="img", workers=10)) == 63 - len("-worker-9")
    assert job_name_limit(tf_job(image="img", workers=1, evaluator=1)) == 63 - len("-evaluator-0")
    assert job_name_limit(mpi_job(image="img", workers=2)) == 63 - len("-launcher")


BUILDERS = [
    lambda **kw: pytorch_job(image="img", **kw),
    lambda **kw: tf_job(image="img", **kw),
    lambda **kw: mx_job(image="img", **kw),
    lambda **kw: xgboost_job(image="img", **kw),
    lambda **kw: paddle_job(image="img", **kw),
    lambda **kw: jax_job(image="img", **kw),
    lambda **kw: mpi_job(image="img", **kw),
    lambda **kw: mpi_job(image="img", api_version="kubeflow.org/v2beta1", **kw),
    lambda **kw: build_job("PyTorchTrainingJob", "img", ["run"], {"worker": 2}, **kw),
]


@pytest.mark.parametrize("builder", BUILDERS)
def test_every_builder_sets_a_backoff_limit_unless_told_otherwise(builder):
    """A replica that restarts for ever fails its job after 3 restarts (Kubeflow v1, MPI v2beta1, T9k)."""
    assert builder()["spec"]["runPolicy"] == {"backoffLimit": 3}
    assert builder(run_policy={"backoffLimit": 7})["spec"]["runPolicy"] == {"backoffLimit": 7}
    assert builder(run_policy={"backoffLimit": None})["spec"]["runPolicy"] == {}  # none at all
    kept = builder(spec={"runPolicy": {"activeDeadlineSeconds": 60}})["spec"]["runPolicy"]
    assert kept == {"activeDeadlineSeconds": 60, "backoffLimit": 3}


def test_a_kind_without_a_backoff_limit_gets_none():
    """The legacy MXNet operator's API has no runPolicy: nothing is added that it would refuse."""
    kind = get_kind("MxJob", "mxnet.mlkube.io/v1beta1")
    job = build_job(
        kind, "img", ["run"], {"SCHEDULER": 1, "SERVER": 1, "WORKER": 1}, spec={"jobMode": "dist"}
    )
    assert "runPolicy" not in job["spec"]


def test_pytorch_job_restart_policy_is_the_decorators():
    """``pytorch_job()`` and ``@task.pytorch_job`` share their default: a failing replica fails the job at
    once (tests/decorators/test_operators.py checks the decorator's manifest)."""
    specs = pytorch_job(image="img")["spec"]["pytorchReplicaSpecs"]
    assert {t: s["restartPolicy"] for t, s in specs.items()} == {"Master": "Never", "Worker": "Never"}

"""The controller's pure parts: condition semantics, defaulting and per-framework env (kubeflow-v1.md)."""

from __future__ import annotations

import copy
import json

import pytest
from localkube.controllers import conditions as cond
from localkube.controllers import kubeflow_env as env
from localkube.controllers.kubeflow_job import JobView
from localkube.controllers.kubeflow_kinds import (
    JAXJOB,
    MPIJOB,
    MXJOB,
    PYTORCHJOB,
    TFJOB,
    KubeflowKind,
)


def view(kind: KubeflowKind, specs: dict, **spec: object) -> JobView:
    obj = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {kind.data.replica_field: specs, **spec},
    }
    return JobView(kind.data, obj)


def rep(container: str, replicas: int | None = 1, **template_spec: object) -> dict:
    spec: dict = {"template": {"spec": {"containers": [{"name": container, "image": "i"}], **template_spec}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def injected(kind: KubeflowKind, job: JobView, rtype: str, index: int) -> dict[str, str]:
    template = copy.deepcopy(job.specs[rtype]["template"])
    assert kind.inject_env is not None
    kind.inject_env(job, template, rtype, index)
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0].get("env", [])}


# -- conditions ----------------------------------------------------------------------------------------------
def types(status: dict) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status["conditions"]]


def test_conditions_are_keyed_by_type_and_move_to_the_end() -> None:
    status: dict = {}
    cond.set_condition(status, "Created", "True", "XCreated", "created")
    cond.set_condition(status, "Running", "True", "XRunning", "running")
    cond.set_condition(status, "Restarting", "True", "XRestarting", "restarting")
    assert types(status) == [("Created", "True"), ("Restarting", "True")]  # Restarting replaced Running
    cond.set_condition(status, "Running", "True", "XRunning", "running")
    assert types(status) == [("Created", "True"), ("Running", "True")]
    cond.set_condition(status, "Created", "True", "XCreated", "a new message only")  # same status and reason
    assert types(status) == [("Created", "True"), ("Running", "True")]
    cond.finish(status, "Succeeded", "XSucceeded", "done")
    assert types(status) == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert status["completionTime"]


def test_nothing_changes_once_failed() -> None:
    status: dict = {}
    cond.set_condition(status, "Running", "True", "XRunning", "running")
    cond.finish(status, "Failed", "XFailed", "boom")
    frozen = copy.deepcopy(status)
    cond.set_condition(status, "Running", "True", "XRunning", "again")
    cond.finish(status, "Succeeded", "XSucceeded", "late")
    assert status == frozen
    assert types(status) == [("Running", "False"), ("Failed", "True")]


def test_transition_time_kept_while_status_is_unchanged() -> None:
    status = {
        "conditions": [{"type": "Running", "status": "True", "reason": "A", "lastTransitionTime": "T0"}]
    }
    cond.set_condition(status, "Running", "True", "B", "other reason")
    assert status["conditions"][0]["lastTransitionTime"] == "T0"
    cond.set_condition(status, "Running", "False", "B", "flipped")
    assert status["conditions"][0]["lastTransitionTime"] != "T0"


def test_stored_replica_statuses_omit_zero_counters() -> None:
    status: dict = {}
    counters = cond.reset_replica_status(status, "Worker")
    counters["active"] = 2
    cond.reset_replica_status(status, "PS")
    assert cond.to_json(status) == {"replicaStatuses": {"Worker": {"active": 2}, "PS": {}}}


# -- defaulting ----------------------------------------------------------------------------------------------
def test_defaulting_normalizes_types_and_fills_replicas_policy_and_port() -> None:
    job = view(TFJOB, {"worker": rep("tensorflow", None), "PS": rep("sidecar")})
    assert list(job.specs) == ["PS", "Worker"]
    assert job.replicas("Worker") == 1
    assert job.restart_policy("Worker") == "Never"
    assert job.run_policy["cleanPodPolicy"] == "None"
    assert job.spec["successPolicy"] == ""
    assert job.containers("Worker")[0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    # No container has the default name: the port goes on container 0.
    assert job.containers("PS")[0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_defaulting_keeps_an_existing_default_port() -> None:
    specs = {"Master": rep("pytorch")}
    specs["Master"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "pytorchjob-port", "containerPort": 1}
    ]
    job = view(PYTORCHJOB, specs)
    assert job.port("Master") == 1
    assert len(job.containers("Master")[0]["ports"]) == 1
    assert job.spec["nprocPerNode"] == "auto"


def test_mpi_and_mxnet_defaults() -> None:
    mpi = view(MPIJOB, {"Launcher": rep("mpi", None), "Worker": rep("mpi", None)}, cleanPodPolicy="All")
    assert (mpi.replicas("Launcher"), mpi.replicas("Worker")) == (1, 0)
    assert mpi.run_policy["cleanPodPolicy"] == "All"
    assert "ports" not in mpi.containers("Launcher")[0]
    mx = view(MXJOB, {"scheduler": rep("mxnet"), "tunertracker": rep("mxnet")})
    assert list(mx.specs) == ["Scheduler", "tunertracker"]  # only Scheduler/Server/Worker are renamed


# -- env ----------------------------------------------------------------------------------------------
def test_tf_config_only_when_distributed_and_only_in_the_tensorflow_container() -> None:
    single = view(TFJOB, {"Worker": rep("tensorflow")})
    assert injected(TFJOB, single, "Worker", 0) == {}
    job = view(TFJOB, {"Chief": rep("tensorflow"), "Worker": rep("tensorflow", 2)})
    template = copy.deepcopy(job.specs["Worker"]["template"])
    template["spec"]["containers"].insert(0, {"name": "sidecar", "image": "i"})
    env.tensorflow(job, template, "Worker", 1)
    sidecar, tf = template["spec"]["containers"]
    assert "env" not in sidecar
    assert json.loads(tf["env"][0]["value"])["cluster"] == {
        "chief": ["j-chief-0.ns.svc:2222"],
        "worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"],
    }


def test_tf_config_sparse_with_dynamic_workers() -> None:
    job = view(TFJOB, {"PS": rep("tensorflow"), "Worker": rep("tensorflow", 2)}, enableDynamicWorker=True)
    assert json.loads(injected(TFJOB, job, "Worker", 1)["TF_CONFIG"]) == {
        "cluster": {"worker": {"1": "j-worker-1.ns.svc:2222"}, "ps": ["j-ps-0.ns.svc:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_pytorch_elastic_env() -> None:
    policy = {
        "rdzvBackend": "c10d",
        "minReplicas": 1,
        "maxReplicas": 2,
        "maxRestarts": 100,
        "rdzvConf": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}],
    }
    job = view(PYTORCHJOB, {"Worker": rep("pytorch", 2)}, elasticPolicy=policy)
    assert injected(PYTORCHJOB, job, "Worker", 1) == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_ENDPOINT": "j-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:2",
        "PET_MAX_RESTARTS": "100",
        "PET_RDZV_CONF": "a=1,b=2",
    }
    defaulted = view(PYTORCHJOB, {"Worker": rep("pytorch", 3)}, elasticPolicy={})
    assert injected(PYTORCHJOB, defaulted, "Worker", 0)["PET_NNODES"] == "3:3"


def test_pytorch_world_size_uses_an_integer_nproc_per_node() -> None:
    job = view(PYTORCHJOB, {"Master": rep("pytorch"), "Worker": rep("pytorch", 3)}, nprocPerNode="4")
    assert injected(PYTORCHJOB, job, "Worker", 2)["WORLD_SIZE"] == "16"
    assert injected(PYTORCHJOB, job, "Worker", 2)["RANK"] == "3"


def test_mxnet_env() -> None:
    specs = {"Scheduler": rep("mxnet"), "Server": rep("mxnet"), "Worker": rep("mxnet", 2)}
    specs["Server"]["template"]["metadata"] = {"annotations": {"tuner-server-key": "srv"}}
    job = view(MXJOB, specs)
    worker = injected(MXJOB, job, "Worker", 1)
    assert json.loads(worker.pop("MX_CONFIG")) == {
        "cluster": {
            "scheduler": [{"url": "j-scheduler-0", "port": 9091}],
            "server": [{"url": "j-server-0", "port": 9091}],
            "worker": [{"url": "j-worker-0", "port": 9091}, {"url": "j-worker-1", "port": 9091}],
        },
        "labels": {"scheduler": "", "server": "srv", "worker": ""},
        "task": {"type": "worker", "index": 1},
    }
    assert worker == {
        "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_PS_ROOT_URI": "j-scheduler-0",
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "2",
        "DMLC_ROLE": "worker",
        "DMLC_USE_KUBERNETES": "1",
        "DMLC_WORKER_ID": "1",
    }
    assert "DMLC_WORKER_ID" not in injected(MXJOB, job, "Server", 0)


def test_jax_env() -> None:
    job = view(JAXJOB, {"Worker": rep("jax", 3)})
    assert injected(JAXJOB, job, "Worker", 2) == {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_PORT": "6666",
        "COORDINATOR_ADDRESS": "j-worker-0",
        "NUM_PROCESSES": "3",
        "PROCESS_ID": "2",
    }


@pytest.mark.parametrize(
    ("kind", "specs", "expected"),
    [
        (TFJOB, {"Chief": 1, "Worker": 2}, {("Chief", 0)}),
        (TFJOB, {"PS": 1, "Worker": 2}, {("Worker", 0)}),
        (PYTORCHJOB, {"Worker": 2}, {("Worker", 0)}),
        (MXJOB, {"Scheduler": 1, "Server": 2, "Worker": 1}, {("Server", 0), ("Server", 1)}),
        (JAXJOB, {"Worker": 2}, {("Worker", 0)}),
    ],
)
def test_master_role(kind: KubeflowKind, specs: dict[str, int], expected: set[tuple[str, int]]) -> None:
    job = view(kind, {t: rep(kind.data.container, n) for t, n in specs.items()})
    roles = {(t, i) for t in job.specs for i in range(job.replicas(t)) if kind.master_role(job, t, i)}
    assert roles == expected

"""The upstream example jobs under the scripted runtime: they succeed, with the names, labels, env vars and
status the Kubeflow Training Operator v1 gives them (kubeflow-v1.md §2-4), seen through the real client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from test_controller_support import (
    MPI_TENSORFLOW_MNIST,
    MXNET_DIST,
    PADDLE_SIMPLE_CPU,
    PYTORCH_SIMPLE,
    TENSORFLOW_SIMPLE,
    XGBOOST,
    KubeClient,
    conditions,
    env_of,
    example,
    is_true,
    kc,
    replica_status,
)

__all__ = ["kc"]


@pytest.fixture
def localkube_namespaces() -> tuple[str, ...]:
    """Several upstream examples name the `kubeflow` namespace; a real cluster must have it too."""
    return ("kubeflow",)


TYPE, INDEX, ROLE = (
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/job-role",
)


def test_tfjob_workers_succeed_with_tf_config(kc: KubeClient) -> None:
    kc.create(example(TENSORFLOW_SIMPLE))
    # Worker 0 decides; worker 1, if still running then, is counted as succeeded once the job is.
    done = lambda j: is_true(j, "Succeeded") and replica_status(j, "Worker") == {"succeeded": 2}  # noqa: E731
    seen = kc.watch_job("TFJob", "tfjob-simple", done, namespace="kubeflow")
    final = seen[-1]
    assert conditions(final) == [
        ("Created", "True", "TFJobCreated"),
        ("Running", "False", "TFJobRunning"),
        ("Succeeded", "True", "TFJobSucceeded"),
    ]
    assert [conditions(s)[:1] for s in seen] == [[("Created", "True", "TFJobCreated")]] * len(seen)
    assert final["status"]["startTime"] <= final["status"]["completionTime"]
    pods = kc.pods("tfjob-simple", "kubeflow")
    assert [p.metadata.name for p in pods] == ["tfjob-simple-worker-0", "tfjob-simple-worker-1"]
    assert pods[0].metadata.labels == {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": "tfjob-simple",
        TYPE: "worker",
        INDEX: "0",
        ROLE: "master",  # no Chief: worker 0 has the master role
    }
    assert ROLE not in pods[1].metadata.labels
    assert pods[1].spec.restart_policy == "OnFailure"
    assert pods[1].spec.containers[0].ports[0].name == "tfjob-port"
    assert json.loads(env_of(pods[1])["TF_CONFIG"]) == {
        "cluster": {
            "worker": ["tfjob-simple-worker-0.kubeflow.svc:2222", "tfjob-simple-worker-1.kubeflow.svc:2222"]
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    owner = pods[0].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller, owner.uid) == (
        "TFJob",
        "tfjob-simple",
        True,
        final["metadata"]["uid"],
    )
    services = kc.core.list_namespaced_service("kubeflow").items
    assert sorted(s.metadata.name for s in services) == ["tfjob-simple-worker-0", "tfjob-simple-worker-1"]
    assert services[0].spec.cluster_ip == "None"
    assert [(p.name, p.port) for p in services[0].spec.ports] == [("tfjob-port", 2222)]
    assert ROLE not in services[0].metadata.labels


def test_tfjob_with_ps_and_custom_port(kc: KubeClient) -> None:
    manifest = example(TENSORFLOW_SIMPLE, namespace="default")
    ps = json.loads(json.dumps(manifest["spec"]["tfReplicaSpecs"]["Worker"]))
    ps.update(replicas=1, restartPolicy="Never")
    ps["template"]["spec"]["containers"][0]["ports"] = [{"name": "tfjob-port", "containerPort": 2223}]
    manifest["spec"]["tfReplicaSpecs"]["ps"] = ps  # lower case: the operator normalizes the key
    manifest["metadata"]["annotations"] = {"localkube.dev/script": json.dumps({"PS": {"duration": None}})}
    kc.create(manifest)
    seen = kc.watch_job("TFJob", "tfjob-simple", lambda j: replica_status(j, "PS") == {"succeeded": 1})
    # Worker 0 decides (no Chief); once Succeeded, the still active PS is counted as succeeded.
    succeeded_at = next(i for i, state in enumerate(seen) if is_true(state, "Succeeded"))
    assert replica_status(seen[succeeded_at], "PS") == {"active": 1}
    pods = {p.metadata.name: p for p in kc.pods("tfjob-simple")}
    assert set(pods) == {"tfjob-simple-ps-0", "tfjob-simple-worker-0", "tfjob-simple-worker-1"}
    config = json.loads(env_of(pods["tfjob-simple-ps-0"])["TF_CONFIG"])
    assert config == {
        "cluster": {
            "ps": ["tfjob-simple-ps-0.default.svc:2223"],
            "worker": ["tfjob-simple-worker-0.default.svc:2222", "tfjob-simple-worker-1.default.svc:2222"],
        },
        "task": {"type": "ps", "index": 0},
        "environment": "cloud",
    }
    assert pods["tfjob-simple-ps-0"].metadata.labels[TYPE] == "ps"


def test_pytorchjob_succeeds_with_rendezvous_env(kc: KubeClient) -> None:
    kc.create(example(PYTORCH_SIMPLE))
    seen = kc.watch_job(
        "PyTorchJob", "pytorch-simple", lambda j: is_true(j, "Succeeded"), namespace="kubeflow"
    )
    assert ("Running", "True", "PyTorchJobRunning") in [c for s in seen for c in conditions(s)]
    final = seen[-1]
    assert conditions(final)[-1] == ("Succeeded", "True", "PyTorchJobSucceeded")
    statuses = final["status"]["replicaStatuses"]
    assert statuses["Master"]["succeeded"] == 1
    assert statuses["Master"]["selector"] == (
        "training.kubeflow.org/job-name=pytorch-simple,training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=master"
    )
    master, worker = kc.pods("pytorch-simple", "kubeflow")
    assert (master.metadata.name, worker.metadata.name) == (
        "pytorch-simple-master-0",
        "pytorch-simple-worker-0",
    )
    assert master.metadata.labels[ROLE] == "master" and ROLE not in worker.metadata.labels
    common = {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "pytorch-simple-master-0",
        "PET_MASTER_ADDR": "pytorch-simple-master-0",
        "WORLD_SIZE": "2",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": "2",
    }
    assert env_of(master) == {**common, "RANK": "0", "PET_NODE_RANK": "0"}
    assert env_of(worker) == {**common, "RANK": "1", "PET_NODE_RANK": "1"}
    assert [c.name for c in worker.spec.init_containers] == ["init-pytorch"]
    assert "nslookup pytorch-simple-master-0" in worker.spec.init_containers[0].command[2]
    assert master.spec.init_containers is None


def test_xgboostjob_succeeds_when_master_succeeds(kc: KubeClient) -> None:
    kc.create(example(XGBOOST))
    final = kc.wait_condition("XGBoostJob", "xgboost-dist-iris-test-train", "Succeeded")
    assert [c[0] for c in conditions(final)] == ["Created", "Running", "Succeeded"]
    pods = kc.pods("xgboost-dist-iris-test-train")
    assert [p.metadata.name for p in pods] == [
        "xgboost-dist-iris-test-train-master-0",
        "xgboost-dist-iris-test-train-worker-0",
        "xgboost-dist-iris-test-train-worker-1",
    ]
    master, _, worker1 = pods
    assert worker1.spec.restart_policy == "Never"  # ExitCode runs pods with Never; the operator restarts them
    expected = {
        "MASTER_PORT": "9991",
        "MASTER_ADDR": "xgboost-dist-iris-test-train-master-0",
        "WORLD_SIZE": "3",
        "PYTHONUNBUFFERED": "1",
        "WORKER_PORT": "9991",
        "WORKER_ADDRS": "xgboost-dist-iris-test-train-worker-0,xgboost-dist-iris-test-train-worker-1",
    }
    assert env_of(master) == {**expected, "RANK": "0"}
    assert env_of(worker1) == {**expected, "RANK": "2"}


def test_paddlejob_collective_mode(kc: KubeClient) -> None:
    kc.create(example(PADDLE_SIMPLE_CPU))
    final = kc.wait_condition("PaddleJob", "paddle-simple-cpu", "Succeeded", namespace="kubeflow")
    assert final["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
    worker0, worker1 = kc.pods("paddle-simple-cpu", "kubeflow")
    env0 = worker0.spec.containers[0].env
    assert [(e.name, e.value) for e in env0] == [
        ("PYTHONUNBUFFERED", "1"),
        ("PADDLE_JOB_ID", "paddle-simple-cpu"),
        ("PADDLE_NNODES", "2"),
        ("POD_IP_DUMMY", None),
        ("PADDLE_MASTER", "$(POD_IP_DUMMY):37777"),
    ]
    assert env0[3].value_from.field_ref.field_path == "status.podIP"
    assert env_of(worker1)["PADDLE_MASTER"] == "paddle-simple-cpu-worker-0:37777"
    assert ROLE not in worker0.metadata.labels  # Paddle gives the master role to a Master only


def test_mpijob_launcher_workers_and_hostfile(kc: KubeClient) -> None:
    kc.create(example(MPI_TENSORFLOW_MNIST, script={"Worker": {"duration": None}}))
    final = kc.wait_condition("MPIJob", "tensorflow-mnist", "Succeeded")
    assert [c[0] for c in conditions(final)] == ["Created", "Running", "Succeeded"]
    assert final["status"]["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    # cleanPodPolicy Running: the workers (still running) go, the finished launcher stays.
    kc.wait_until(
        lambda: [p.metadata.name for p in kc.pods("tensorflow-mnist")] == ["tensorflow-mnist-launcher"]
    )
    (launcher,) = kc.pods("tensorflow-mnist")
    assert launcher.metadata.labels == {
        "training.kubeflow.org/operator-name": "mpijob-controller",
        "training.kubeflow.org/job-name": "tensorflow-mnist",
        TYPE: "launcher",
        ROLE: "master",
    }
    env = env_of(launcher)
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["I_MPI_HYDRA_BOOTSTRAP"] == "rsh"
    assert launcher.spec.init_containers[0].name == "kubectl-delivery"
    config_map = kc.core.read_namespaced_config_map("tensorflow-mnist-config", "default")
    assert (
        config_map.data["hostfile"]
        == "tensorflow-mnist-worker-0 slots=1\ntensorflow-mnist-worker-1 slots=1\n"
    )
    assert config_map.metadata.labels == {"app": "tensorflow-mnist"}
    assert kc.core.list_namespaced_service("default").items == []
    # the launcher's identity, without which a real API server refuses the launcher pod
    account = kc.core.read_namespaced_service_account("tensorflow-mnist-launcher", "default")
    assert launcher.spec.service_account_name == account.metadata.name
    rbac = client.RbacAuthorizationV1Api(kc.core.api_client)
    role = rbac.read_namespaced_role("tensorflow-mnist-launcher", "default")
    assert role.rules[1].resource_names == ["tensorflow-mnist-worker-0", "tensorflow-mnist-worker-1"]
    binding = rbac.read_namespaced_role_binding("tensorflow-mnist-launcher", "default")
    assert (binding.subjects[0].name, binding.role_ref.name) == (account.metadata.name, role.metadata.name)
    reasons = kc.reasons("tensorflow-mnist-worker-0")
    assert "Started" in reasons


def test_mxjob_succeeds_when_the_scheduler_succeeds(kc: KubeClient) -> None:
    kc.create(example(MXNET_DIST, script={"Server": {"duration": None}, "Worker": {"duration": None}}))
    final = kc.wait_condition("MXJob", "mxnet-job", "Succeeded")
    assert conditions(final)[-1] == ("Succeeded", "True", "MXJobSucceeded")
    assert replica_status(final, "Scheduler") == {"succeeded": 1}
    pods = {p.metadata.name: p for p in kc.pods("mxnet-job")}
    assert pods["mxnet-job-server-0"].metadata.labels[ROLE] == "master"  # MXNet's master role is the Server
    assert ROLE not in pods["mxnet-job-scheduler-0"].metadata.labels
    env = env_of(pods["mxnet-job-worker-0"])
    assert (env["DMLC_ROLE"], env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == (
        "worker",
        "mxnet-job-scheduler-0",
        "9991",
    )
    assert json.loads(env["MX_CONFIG"])["task"] == {"type": "worker", "index": 0}

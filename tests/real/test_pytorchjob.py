"""A PyTorchJob end to end on a real kube-apiserver: localkube's agent is the training operator and the
kubelet, so every request of the provider (create, watch, pods, events, pods/log) is answered by Kubernetes
itself, and the replica logs in the task log came through the API server's log proxy from the agent's kubelet
endpoint (there is no other way to them)."""

from __future__ import annotations

import json
import urllib.error

import pytest
import yaml
from localkube.realcluster import RealCluster

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KIND_BY_NAME, MODES, make_context, manifest, run_operator
from tests.real.rbac import documented_rbac

pytestmark = pytest.mark.timeout(180)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
SCRIPT = {"default": {"duration": 0.5, "logs": ["epoch 1 loss 0.5", "{type}-{index} saved model"]}}


def operator(name: str, script=SCRIPT, namespace: str = "default") -> PyTorchJobOperator:
    job = manifest(PYTORCH, script, name=name, namespace=namespace)
    return PyTorchJobOperator(task_id="train", job=job, check_interval=0.2, log_replicas="all")


def pod_log(cluster: RealCluster, namespace: str, pod: str) -> str:
    return cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log").decode()


@pytest.mark.parametrize("mode", MODES)
def test_success_streams_the_replica_logs_through_the_api_server(real_cluster, admin_conn, mode, capsys):
    name = f"real-ok-{mode[:5]}"

    result = run_operator(operator(name), make_context(), mode)

    assert result["state"] == "Succeeded"
    assert set(result["replicas"]) == {"Master", "Worker"}
    out = capsys.readouterr().out
    assert "[master-0] master-0 saved model" in out
    assert "[worker-0] worker-0 saved model" in out
    assert "master-0 saved model" in pod_log(real_cluster, "default", f"{name}-master-0")


@pytest.mark.parametrize("mode", MODES)
def test_failure_names_the_replica_and_its_exit_code(real_cluster, admin_conn, mode):
    script = {
        "default": {"duration": 2},
        "Master": {
            "duration": 0.2,
            "exit_code": 3,
            "logs": ["loading shards", "RuntimeError: shard 7 is corrupt"],
        },
    }

    with pytest.raises(TrainingJobError) as failure:
        run_operator(operator(f"real-fail-{mode[:5]}", script), make_context(), mode)

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 3" in message
    assert "master" in message.lower()
    assert "RuntimeError: shard 7 is corrupt" in message


# -- RBAC: exactly the Role of docs/rbac.md ------------------------------------------------------------------


def test_the_service_account_has_only_what_the_role_grants(real_cluster, service_account_kubeconfig):
    token = yaml.safe_load(service_account_kubeconfig.read_text())["users"][0]["user"]["token"]
    namespace = documented_rbac()[0]["metadata"]["namespace"]

    real_cluster.request("GET", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", token=token)
    for path in (
        "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs",  # another namespace
        f"/api/v1/namespaces/{namespace}/secrets",  # a resource the Role does not name
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            real_cluster.request("GET", path, token=token)
        assert refused.value.code == 403, path


@pytest.mark.parametrize("mode", MODES)
def test_the_documented_role_suffices(real_cluster, sa_conn, mode, capsys):
    name = f"real-rbac-{mode[:5]}"

    result = run_operator(operator(name, namespace=sa_conn), make_context(), mode)

    assert result["state"] == "Succeeded" and result["namespace"] == sa_conn
    out = capsys.readouterr().out
    assert "[master-0] master-0 saved model" in out and "[worker-0] worker-0 saved model" in out
    assert "forbidden" not in out.lower()  # no refused request, not even a retried one
    job = json.loads(
        real_cluster.request("GET", f"/apis/kubeflow.org/v1/namespaces/{sa_conn}/pytorchjobs/{name}")
    )
    assert job["metadata"]["name"] == name

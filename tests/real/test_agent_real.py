"""localkube agent as a kubelet on a real control plane: its node's Lease keeps kube-controller-manager's node
lifecycle controller content (and the node goes NotReady without it), its kubelet endpoint lets only
kube-apiserver's kubelet client certificate (or another user the API server authorizes) read logs, and a
restarted agent settles the pods its previous process ran as their restartPolicy says.

One cluster for the module: a node-monitor grace period of 6 s (a real cluster's is 40-50 s), an agent that
renews its Lease every second and posts its Node's status only at registration, so the Lease alone is the
heartbeat."""

from __future__ import annotations

import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.realcluster import RealCluster, write_certificates, write_client_certificate

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KIND_BY_NAME, in_thread, make_context, manifest, run_operator
from tests.real.conftest import launch

pytestmark = pytest.mark.timeout(240)
NODE = "localkube-agent"
GRACE = 6  # seconds: --node-monitor-grace-period
UNREACHABLE = "node.kubernetes.io/unreachable"
PYTORCH = KIND_BY_NAME["PyTorchJob"]
JOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
FOREVER = {"default": {"duration": None, "logs": ["{type}-{index} training"]}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    agent = ("--runtime", "scripted", "--controllers", "kubeflow")
    with launch(
        tmp_path_factory,
        "agentgaps",
        agent_args=(*agent, "--heartbeat-seconds", "1", "--node-status-seconds", "3600"),
        controller_manager_args=(f"--node-monitor-grace-period={GRACE}s", "--node-monitor-period=1s"),
    ) as running:
        yield running


@pytest.fixture
def conn(cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    from localkube.pytest_plugin import connection_json

    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(cluster.kubeconfig))
    return "kubernetes_default"


def node(cluster: RealCluster) -> dict:
    return cluster.get(f"/api/v1/nodes/{NODE}")


def ready(node: dict) -> dict:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def taints(node: dict) -> set[str]:
    return {t["key"] for t in node["spec"].get("taints") or []}


def renewed(cluster: RealCluster) -> dt.datetime:
    lease = cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
    return dt.datetime.fromisoformat(lease["spec"]["renewTime"])


# -- 1. the node's heartbeat: its Lease ------------------------------------------------------------------


def test_the_lease_keeps_the_node_ready_past_the_grace_period(cluster):
    lease = cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
    before = ready(node(cluster))
    first = renewed(cluster)

    # Three grace periods of renewals: a node silent for one is Unknown and tainted by then.
    cluster.wait_for(lambda: renewed(cluster) - first > dt.timedelta(seconds=3 * GRACE), 60)

    after = node(cluster)
    assert lease["spec"]["holderIdentity"] == NODE and lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert ready(after)["status"] == "True"
    assert ready(after)["lastTransitionTime"] == before["lastTransitionTime"]  # never left Ready
    assert ready(after)["lastHeartbeatTime"] == before["lastHeartbeatTime"]  # the Lease alone did it
    assert UNREACHABLE not in taints(after)


def test_without_its_agent_the_node_goes_unknown_and_is_tainted(cluster):
    cluster.kill_agent()
    try:
        cluster.wait_for(lambda: ready(node(cluster))["status"] == "Unknown", 60)
        cluster.wait_for(lambda: UNREACHABLE in taints(node(cluster)), 60)
        assert ready(node(cluster))["reason"] == "NodeStatusUnknown"
    finally:
        cluster.start_agent()
    cluster.wait_for(lambda: ready(node(cluster))["status"] == "True", 60)
    cluster.wait_for(lambda: UNREACHABLE not in taints(node(cluster)), 60)


# -- 2. the kubelet endpoint: authenticated and authorized -----------------------------------------------


def pod_named(cluster: RealCluster, name: str) -> dict | None:
    return cluster.get_or_none(f"/api/v1/namespaces/default/pods/{name}")


def is_running(pod: dict | None) -> bool:
    return (pod or {}).get("status", {}).get("phase") == "Running"


def kubelet_get(cluster: RealCluster, path: str, cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
    """GET the agent's kubelet endpoint directly (as a client that does not check the kubelet's certificate,
    like kube-apiserver without --kubelet-certificate-authority), with ``cert`` as client certificate."""
    port = node(cluster)["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=context, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture(scope="module")
def logging_pod(cluster: RealCluster) -> str:
    script = {"default": {"duration": None, "logs": ["hello from the agent's kubelet"]}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "logger",
            "namespace": "default",
            "annotations": {"localkube.dev/script": json.dumps(script)},
        },
        "spec": {"containers": [{"name": "main", "image": "example/main:1"}], "restartPolicy": "Never"},
    }
    cluster.apply(pod)
    cluster.wait_for(lambda: is_running(pod_named(cluster, "logger")), 60)
    return "/containerLogs/default/logger/main"


def test_pod_logs_go_through_the_api_servers_kubelet_client_certificate(cluster, logging_pod):
    text = cluster.request("GET", "/api/v1/namespaces/default/pods/logger/log").decode()
    assert "hello from the agent's kubelet" in text

    certificate = (cluster.certs["kubelet_client_cert"], cluster.certs["kubelet_client_key"])
    assert kubelet_get(cluster, logging_pod, certificate)[0] == 200


def test_the_kubelet_endpoint_refuses_a_caller_without_a_certificate(cluster, logging_pod):
    assert kubelet_get(cluster, logging_pod) == (401, "Unauthorized")


def test_the_kubelet_endpoint_refuses_a_certificate_of_another_ca(cluster, logging_pod, tmp_path):
    other = write_certificates(tmp_path)  # its own CA, and a system:masters client certificate from it

    # TLS 1.3: the client's handshake ends before the server checks the certificate; its refusal (an alert,
    # or the connection closed) is the first thing read.
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        kubelet_get(cluster, logging_pod, (other["kubelet_client_cert"], other["kubelet_client_key"]))


def test_the_kubelet_endpoint_refuses_a_user_the_api_server_forbids(cluster, logging_pod, tmp_path):
    nobody = write_client_certificate(
        tmp_path, "nobody", "nobody", ("readers",), cluster.certs["ca"], cluster.certs["ca_key"]
    )

    status, text = kubelet_get(cluster, logging_pod, nobody)

    assert status == 403
    assert text == "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[proxy])"


# -- 3. a restarted agent and the pods of its previous process -------------------------------------------


def job_pods(cluster: RealCluster, name: str) -> list[dict]:
    selector = f"training.kubeflow.org/job-name={name}"
    return list(cluster.get(f"/api/v1/namespaces/default/pods?labelSelector={selector}")["items"])


def all_running(cluster: RealCluster, name: str) -> bool:
    found = job_pods(cluster, name)
    return len(found) == 2 and all(is_running(p) for p in found)


def restart_agent(cluster: RealCluster) -> None:
    cluster.kill_agent()
    cluster.start_agent()


def test_pods_of_restart_policy_never_fail_and_so_does_the_job(cluster, conn):
    name = "lost-never"
    op = PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, FOREVER, name=name), check_interval=0.2, deferrable=False
    )
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    cluster.wait_for(lambda: all_running(cluster, name), 60)

    restart_agent(cluster)
    worker.join(timeout=120)

    error = outcome.get("error")
    assert isinstance(error, TrainingJobError), outcome
    assert error.status == "failed" and "137" in str(error), str(error)
    for pod in job_pods(cluster, name):
        (container,) = pod["status"]["containerStatuses"]
        assert pod["status"]["phase"] == "Failed"
        assert "localkube agent on node" in pod["status"]["message"]
        assert container["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
        assert container["state"]["terminated"]["exitCode"] == 137
    cluster.request("DELETE", f"{JOBS}/{name}")


def test_pods_of_restart_policy_on_failure_restart_and_the_job_runs_on(cluster, conn):
    name = "lost-onfailure"
    cluster.apply(manifest(PYTORCH, FOREVER, name=name, namespace="default", restart_policy="OnFailure"))
    cluster.wait_for(lambda: all_running(cluster, name), 60)
    uids = {p["metadata"]["uid"] for p in job_pods(cluster, name)}

    restart_agent(cluster)

    def restarted() -> bool:
        found = job_pods(cluster, name)
        statuses = [s for p in found for s in p["status"].get("containerStatuses") or []]
        return all_running(cluster, name) and all(s["restartCount"] == 1 and s.get("ready") for s in statuses)

    cluster.wait_for(restarted, 60)
    for pod in job_pods(cluster, name):
        (container,) = pod["status"]["containerStatuses"]
        assert container["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
        assert "running" in container["state"]
    assert {p["metadata"]["uid"] for p in job_pods(cluster, name)} == uids  # restarted in place
    status = cluster.get(f"{JOBS}/{name}")["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}.get("Failed") != "True"
    log = cluster.request("GET", f"/api/v1/namespaces/default/pods/{name}-master-0/log").decode()
    assert "master-0 training" in log  # the second incarnation's log, through the API server
    cluster.request("DELETE", f"{JOBS}/{name}")

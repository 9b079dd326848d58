"""Failure modes of a real cluster, each made to happen for real: kube-apiserver killed and started
again while a deferred task waits, etcd compacted under the provider's watch (410 Gone), kube-apiserver's
in-flight limit answering 429, and a kind whose CustomResourceDefinition is not installed."""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import urllib.error
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from localkube.realcluster import RealCluster

from airflow_provider_training.operators import MXJobOperator, PyTorchJobOperator, TFJobOperator
from tests.fixtures import CRDS
from tests.operators.harness import KIND_BY_NAME, first_event, in_thread, make_context, manifest
from tests.real.conftest import launch
from tests.real.test_lifecycle import running

pytestmark = pytest.mark.timeout(240)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
JOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
# Long enough that the job is still running when kube-apiserver is back (a restart takes a few seconds).
SLOW = {"default": {"duration": 20, "logs": ["epoch 1 loss 0.5", "{type}-{index} saved model"]}}


def pytorch_crd_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    crds = tmp_path_factory.mktemp("pytorch-crd")
    (crds / "kubeflow.org-v1").mkdir()
    shutil.copy(CRDS / "kubeflow.org-v1" / "pytorchjobs.yaml", crds / "kubeflow.org-v1")
    return crds


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A second cluster: only the PyTorchJob CRD, and kube-apiserver without its watch cache, so that every
    watch is served by etcd and a compacted resourceVersion is answered 410 Gone as etcd decides."""
    crds = pytorch_crd_only(tmp_path_factory)
    with launch(tmp_path_factory, "bare", crd_dir=crds, apiserver_args=("--watch-cache=false",)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def throttled_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A third cluster whose kube-apiserver serves one read-only and one mutating request at a time (the old
    max-in-flight filter, API Priority and Fairness off): the next one is answered 429 with Retry-After: 1.
    Members of system:masters (the admin, kube-controller-manager, the agent) are exempt."""
    flags = ("--max-requests-inflight=1", "--max-mutating-requests-inflight=1")
    flags += ("--enable-priority-and-fairness=false",)
    crds = pytorch_crd_only(tmp_path_factory)
    with launch(tmp_path_factory, "throttled", crd_dir=crds, apiserver_args=flags) as cluster:
        yield cluster


@pytest.fixture
def bare_conn(bare_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    from localkube.pytest_plugin import connection_json

    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(bare_cluster.kubeconfig))
    return "kubernetes_default"


def operator(name: str, script=SLOW) -> PyTorchJobOperator:
    return PyTorchJobOperator(
        task_id="train",
        job=manifest(PYTORCH, script, name=name),
        check_interval=0.2,
        log_replicas="all",
        deferrable=True,
    )


def wait_deferred(op: PyTorchJobOperator):
    """Submit (execute -> TaskDeferred), then run the trigger to its event and resume, in a thread."""
    context = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger, kwargs = deferred.value.trigger, deferred.value.kwargs or {}
    return in_thread(
        lambda: op.resume_execution("execute_complete", {**kwargs, "event": first_event(trigger)}, context)
    )


def succeeded_at(cluster: RealCluster, name: str) -> datetime:
    conditions = cluster.get(f"{JOBS}/{name}")["status"]["conditions"]
    (when,) = [c["lastTransitionTime"] for c in conditions if c["type"] == "Succeeded"]
    return datetime.fromisoformat(when.replace("Z", "+00:00"))


def jobs_named(cluster: RealCluster, prefix: str) -> list[dict]:
    return [j for j in cluster.get(JOBS)["items"] if j["metadata"]["name"].startswith(prefix)]


def test_a_deferred_wait_rides_out_an_api_server_restart(real_cluster, admin_conn, capsys):
    name = "real-apiserver-restart"
    waiter, outcome = wait_deferred(operator(name))
    real_cluster.wait_for(lambda: running(real_cluster, name), 60)
    uid = real_cluster.get(f"{JOBS}/{name}")["metadata"]["uid"]

    down = real_cluster.restart_apiserver()
    back = datetime.now(UTC).replace(microsecond=0)

    assert waiter.is_alive(), f"the wait ended while kube-apiserver was down ({down:.1f} s): {outcome}"
    waiter.join(timeout=120)
    assert outcome.get("result", {}).get("state") == "Succeeded", outcome
    # The agent (operator and kubelet) relisted: it finished the job after the restart.
    assert succeeded_at(real_cluster, name) >= back
    assert [j["metadata"]["uid"] for j in jobs_named(real_cluster, name)] == [uid]  # no second job
    out = capsys.readouterr().out
    for line in ("[master-0] master-0 saved model", "[worker-0] worker-0 saved model"):
        assert out.count(line) == 1, (line, out)  # not lost, not repeated


def test_etcd_compaction_expires_the_watch_and_the_wait_relists(bare_cluster, bare_conn, caplog):
    caplog.set_level(logging.INFO)
    name = "real-compacted"
    waiter, outcome = wait_deferred(operator(name))
    bare_cluster.wait_for(lambda: running(bare_cluster, name), 60)
    before = bare_cluster.etcd_revision()
    for index in range(30):  # history that the compaction removes, so the watch's resourceVersion is old
        bare_cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"churn-{index}", "namespace": "default"},
                "data": {"i": str(index)},
            }
        )
    compacted = bare_cluster.compact_etcd()
    assert compacted > before
    # A restart ends every watch; the provider's resumes from a resourceVersion etcd has compacted away.
    bare_cluster.restart_apiserver()

    waiter.join(timeout=120)
    assert outcome.get("result", {}).get("state") == "Succeeded", outcome
    expired = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert any("410 Expired" in m and "relisting" in m and "pytorchjobs" in m for m in expired), caplog.text


def submit_without_crd(name: str) -> Exception:
    job = manifest(KIND_BY_NAME["TFJob"], {"default": {"duration": 0.1}}, name=name)
    with pytest.raises(Exception) as failure:
        TFJobOperator(task_id="train", job=job, check_interval=0.2).execute(make_context())
    return failure.value


def test_a_kind_without_its_crd_fails_the_task_naming_the_request(bare_cluster, bare_conn):
    error = submit_without_crd("real-no-crd")

    # What a real kube-apiserver answers for a resource its served group kubeflow.org/v1 lacks: a plain-text
    # 404 (no Status object), and the task fails before anything is created.
    assert str(error).startswith("list tfjobs.kubeflow.org in namespace default: 404"), error
    assert "tfjobs" not in json_names(bare_cluster)


def test_a_kind_without_its_crd_names_the_missing_crd(bare_cluster, bare_conn):
    error = submit_without_crd("real-no-crd-hint")

    assert "CustomResourceDefinition installed?" in str(error), error


def test_a_kind_served_in_another_version_names_the_version_served(legacy_admin_conn):
    """``mxjobs.kubeflow.org`` is the Kubeflow v1 MXJob's CRD name and the legacy MXNet operator's, which the
    families' cluster serves in v1alpha1: a v1 MXJob submitted there says so, instead of the CRD hint."""
    job = manifest(KIND_BY_NAME["MXJob"], {"default": {"duration": 0.1}}, name="real-v1-mxjob")
    with pytest.raises(Exception) as failure:
        MXJobOperator(task_id="train", job=job, check_interval=0.2).execute(make_context())

    error = str(failure.value)
    assert "mxjobs.kubeflow.org" in error and ": 404" in error, error
    assert "this cluster serves mxjobs.kubeflow.org in v1alpha1, not in v1" in error, error
    assert "CustomResourceDefinition installed?" not in error, error


def json_names(cluster: RealCluster) -> set[str]:
    crds = cluster.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    return {c["spec"]["names"]["plural"] for c in crds}


# -- 429 ---------------------------------------------------------------------------------------------------


def hold_read_slot(cluster: RealCluster, token: str) -> ssl.SSLSocket | None:
    """A client that asks for ~24 MB of ConfigMaps and reads only the status line: kube-apiserver's write
    blocks once the socket buffers are full, and the request holds the only read-only in-flight slot until
    closed. None if the request was itself answered 429 (another read held the slot as it arrived): the
    caller tries again, as a test that polls the limit right after sending the request would race it."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, _, port = cluster.url.removeprefix("https://").rpartition(":")
    raw.connect((host, int(port)))
    context = ssl.create_default_context(cafile=str(cluster.certs["ca"]))
    conn = context.wrap_socket(raw, server_hostname=host)
    request = (
        f"GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: application/json\r\n\r\n"
    )
    conn.sendall(request.encode())
    head = b""
    while b"\r\n" not in head and len(head) < 64:
        chunk = conn.recv(64 - len(head))
        if not chunk:
            break
        head += chunk
    if head.startswith(b"HTTP/1.1 200 "):
        return conn
    conn.close()
    if head.startswith(b"HTTP/1.1 429 "):
        return None
    raise AssertionError(f"the held read was answered {head!r}")


def refused(cluster: RealCluster, token: str) -> str | None:
    """The Retry-After of a 429 to a read as ``token``, or None if the read was served."""
    try:
        cluster.request("GET", "/api/v1/namespaces/default/pods", token=token)
    except urllib.error.HTTPError as err:
        if err.code == 429:
            return str(err.headers.get("Retry-After"))
        raise
    return None


def test_a_429_is_retried_after_its_retry_after(throttled_cluster, monkeypatch, caplog):
    from localkube.pytest_plugin import connection_json

    cluster = throttled_cluster
    caplog.set_level(logging.INFO)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "airflow", "namespace": "default"},
        }
    )
    cluster.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "airflow-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "airflow", "namespace": "default"}],
        },
    )
    token = cluster.service_account_token("default", "airflow")
    user = "system:serviceaccount:default:airflow"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(cluster.kubeconfig_for(user, token))
    )
    for index in range(24):  # as admin (exempt from the limit)
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"big-{index}", "namespace": "default"},
                "data": {"blob": "x" * 1_000_000},
            }
        )
    hold = cluster.wait_for(lambda: hold_read_slot(cluster, token), 30)
    try:
        retry_after = cluster.wait_for(lambda: refused(cluster, token), 30)
        assert retry_after == "1"
        op = operator("real-throttled")
        submitter, outcome = in_thread(lambda: op.execute(make_context()))
        cluster.wait_for(lambda: "429" in caplog.text, 30)
    finally:
        hold.close()
    submitter.join(timeout=60)

    assert isinstance(outcome.get("error"), TaskDeferred), outcome  # submitted, then deferred
    retries = [
        r.getMessage() for r in caplog.records if "429" in r.getMessage() and "retry" in r.getMessage()
    ]
    assert retries and all(m.endswith("in 1.00s") for m in retries), retries
    assert cluster.get(f"{JOBS}/real-throttled")["metadata"]["name"] == "real-throttled"

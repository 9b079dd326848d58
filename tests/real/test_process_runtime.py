"""localkube's process runtime on a real kube-apiserver: ``localkube agent --runtime process`` runs every
replica of a job as a local Python process with the env the training-operator emulation set (MASTER_ADDR,
RANK, TF_CONFIG, ...), cluster addresses mapped to 127.0.0.1 and local ports, so the replicas talk over TCP.
Their output reaches the provider only through the API server's pods/log proxy to the agent's kubelet
endpoint. Each replica ends by waiting for its job's release file, so a deferrable task defers before its job
can end, however slow the machine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client, config
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.specs import build_job
from tests.operators.harness import KINDS, MODES, first_event, in_thread, make_context
from tests.real.conftest import launch

pytestmark = pytest.mark.timeout(240)

PROCESS_AGENT = ("--runtime", "process", "--controllers", "kubeflow")
RELEASE = """
import os, pathlib, time
release = pathlib.Path(os.environ["RELEASE"])
while not release.exists():
    time.sleep(0.05)
"""
# Master and worker meet at MASTER_ADDR:MASTER_PORT, as torch.distributed's TCP store does.
RENDEZVOUS = """
import os, socket, sys, time
rank, addr, port = int(os.environ["RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} via {addr}:{port}", flush=True)
if rank == 0:
    with socket.create_server((addr, port)) as server:
        conn, _ = server.accept()
        with conn:
            print("master got:", conn.recv(100).decode(), flush=True)
            conn.sendall(b"welcome")
else:
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    with sock:
        sock.sendall(f"hello from rank {rank}".encode())
        print("worker got:", sock.recv(100).decode(), flush=True)
"""
# The parameter server serves one worker at the address TF_CONFIG gives it.
TF_PS_WORKER = """
import json, os, socket, sys, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
print("TF_CONFIG", json.dumps(config), flush=True)
host, port = config["cluster"]["ps"][0].rsplit(":", 1)
if task["type"] == "ps":
    with socket.create_server((host, int(port))) as server:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"parameters for " + conn.recv(100))
else:
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    with sock:
        sock.sendall(b"gradients")
        print("worker got", sock.recv(100).decode(), flush=True)
"""
ENVIRONMENT = """
import json, os
print(json.dumps(dict(os.environ)), flush=True)
"""
SIGTERM = """
import os, pathlib, signal, sys
def stopped(signum, frame):
    pathlib.Path(f"{os.environ['RELEASE']}.{os.environ['HOSTNAME']}.terminated").touch()
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
print("waiting for SIGTERM", flush=True)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    with launch(tmp_path_factory, "process", agent_args=PROCESS_AGENT) as real:
        yield real


@pytest.fixture
def conn(cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(cluster.kubeconfig))
    return "default"


def job(
    kind: str,
    name: str,
    replicas: dict[str, int],
    script: str,
    release: Path,
    after: str = "",
    **options: Any,
) -> dict[str, Any]:
    """A ``kind`` job whose replicas run ``script``, wait for ``release``, then run ``after``; ``options`` go
    to ``build_job``."""
    return build_job(
        kind,
        "python:3.12-slim",  # ignored: the process runtime runs the command on this machine
        ["python", "-c", script + RELEASE + after],
        replicas,
        name=name,
        namespace="default",
        restart_policy="Never",
        env={"RELEASE": str(release)},
        **options,
    )


def operator(manifest: dict) -> Any:
    cls = getattr(operators, f"{manifest['kind']}Operator")
    return cls(task_id="train", job=manifest, check_interval=0.2, log_replicas="all")


def run_released(op: Any, mode: str, release: Path) -> Any:
    """Run ``op`` as Airflow would in ``mode``; the job's replicas are released once the task deferred (at
    once in sync mode)."""
    context = make_context()
    op.deferrable = mode == "deferrable"
    if mode == "sync":
        release.touch()
        return op.execute(context)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    release.touch()
    event = first_event(deferred.value.trigger)
    return op.resume_execution("execute_complete", {**(deferred.value.kwargs or {}), "event": event}, context)


def replica_lines(out: str, replica: str) -> list[str]:
    """The lines of ``replica`` in the task's output (``... [master-0] text [logger] loc=file:line``)."""
    found = (re.search(rf"\[{replica}\] (.*?)(?: \[[\w.]+\] loc=\S+)?$", line) for line in out.splitlines())
    return [match.group(1) for match in found if match]


def pod_log(cluster: RealCluster, pod: str) -> list[str]:
    return cluster.request("GET", f"/api/v1/namespaces/default/pods/{pod}/log").decode().splitlines()


def pod_env(cluster: RealCluster, pod: str) -> dict[str, str]:
    container = cluster.get(f"/api/v1/namespaces/default/pods/{pod}")["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@pytest.mark.parametrize("mode", MODES)
def test_pytorchjob_replicas_rendezvous_over_tcp(cluster, conn, mode, tmp_path, capsys):
    name = f"proc-ddp-{mode[:5]}"

    manifest = job("PyTorchJob", name, {"Master": 1, "Worker": 1}, RENDEZVOUS, tmp_path / name)
    result = run_released(operator(manifest), mode, tmp_path / name)

    assert result["state"] == "Succeeded"
    out = capsys.readouterr().out
    master, worker = replica_lines(out, "master-0"), replica_lines(out, "worker-0")
    assert master[0].startswith("rank 0 of 2 via 127.0.0.1:"), master
    assert worker[0] == master[0].replace("rank 0", "rank 1")  # one address and port for both
    assert master[1:] == ["master got: hello from rank 1"] and worker[1:] == ["worker got: welcome"]
    assert pod_log(cluster, f"{name}-master-0") == master
    stored = pod_env(cluster, f"{name}-worker-0")  # the operator's env, unrewritten
    assert (stored["MASTER_ADDR"], stored["RANK"], stored["WORLD_SIZE"]) == (f"{name}-master-0", "1", "2")
    assert int(master[0].rsplit(":", 1)[1]) != int(stored["MASTER_PORT"])  # a local port of its own


@pytest.mark.parametrize("mode", MODES)
def test_pytorchjob_master_failure_names_the_replica_and_its_exit_code(cluster, conn, mode, tmp_path):
    name = f"proc-fail-{mode[:5]}"
    script = 'print("loading shards", flush=True)\n'
    after = (
        "import sys\n"
        'if os.environ["RANK"] == "0":\n'
        '    print("RuntimeError: shard 7 is corrupt", file=sys.stderr, flush=True)\n'
        "    sys.exit(3)\n"
    )
    manifest = job("PyTorchJob", name, {"Master": 1, "Worker": 1}, script, tmp_path / name, after)

    with pytest.raises(TrainingJobError) as failure:
        run_released(operator(manifest), mode, tmp_path / name)

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 3" in message and "master" in message.lower()
    assert "RuntimeError: shard 7 is corrupt" in message  # stderr is in the pod log too


def test_tfjob_ps_and_worker_meet_through_tf_config(cluster, conn, tmp_path, capsys):
    manifest = job("TFJob", "proc-tf", {"PS": 1, "Worker": 1}, TF_PS_WORKER, tmp_path / "proc-tf")

    result = run_released(operator(manifest), "deferrable", tmp_path / "proc-tf")

    assert result["state"] == "Succeeded"
    out = capsys.readouterr().out
    worker = replica_lines(out, "worker-0")
    assert worker[1:] == ["worker got parameters for gradients"], worker
    seen = json.loads(worker[0].removeprefix("TF_CONFIG "))
    ps, own = seen["cluster"]["ps"][0], seen["cluster"]["worker"][0]
    assert ps.startswith("127.0.0.1:") and own.startswith("127.0.0.1:") and ps != own
    stored = json.loads(pod_env(cluster, "proc-tf-worker-0")["TF_CONFIG"])
    assert stored["cluster"]["ps"] == ["proc-tf-ps-0.default.svc:2222"], stored  # the operator's address


def test_tfjob_worker_failure_names_the_replica_and_its_exit_code(cluster, conn, tmp_path):
    after = (
        "import json, sys\n"
        'if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "worker":\n'
        '    print("worker: out of memory", file=sys.stderr, flush=True)\n'
        "    sys.exit(2)\n"
    )
    manifest = job("TFJob", "proc-tf-fail", {"PS": 1, "Worker": 1}, "", tmp_path / "proc-tf-fail", after)

    with pytest.raises(TrainingJobError) as failure:
        run_released(operator(manifest), "sync", tmp_path / "proc-tf-fail")

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 2" in message and "worker" in message.lower() and "out of memory" in message


def test_logs_follow_live_through_the_proxy(cluster, conn, tmp_path):
    release = tmp_path / "proc-live"
    script, after = 'print("epoch 1 loss 0.5", flush=True)\n', 'print("model saved", flush=True)\n'
    manifest = job("PyTorchJob", "proc-live", {"Master": 1}, script, release, after)
    cluster.apply(manifest)
    core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    try:
        cluster.wait_for(lambda: phase(cluster, "proc-live-master-0") == "Running", 60)
        stream = core.read_namespaced_pod_log(
            "proc-live-master-0", "default", follow=True, _preload_content=False
        )
        chunks, received = stream.stream(), b""
        while b"epoch 1" not in received:
            received += next(chunks)
        assert phase(cluster, "proc-live-master-0") == "Running"  # the line came while the process runs
        release.touch()
        received += b"".join(chunks)  # the stream ends when the container terminates
    finally:
        core.api_client.close()
    assert received.decode().splitlines() == ["epoch 1 loss 0.5", "model saved"]
    cluster.request("DELETE", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/proc-live")


def test_on_kill_terminates_the_replica_processes(cluster, conn, tmp_path):
    release = tmp_path / "proc-kill"
    op = operator(job("PyTorchJob", "proc-kill", {"Master": 1, "Worker": 1}, SIGTERM, release))
    worker, outcome = in_thread(lambda: op.execute(make_context()))
    for pod in ("proc-kill-master-0", "proc-kill-worker-0"):
        cluster.wait_for(lambda pod=pod: "waiting for SIGTERM" in "\n".join(logs(cluster, pod)), 60)

    op.on_kill()
    worker.join(timeout=90)

    assert isinstance(outcome.get("error"), TrainingJobError) and outcome["error"].status == "deleted", (
        outcome
    )
    # Graceful deletion by kube-apiserver, finished by the agent: SIGTERM reached each replica's process.
    for pod in ("proc-kill-master-0", "proc-kill-worker-0"):
        cluster.wait_for(lambda pod=pod: Path(f"{release}.{pod}.terminated").exists(), 60)
    cluster.wait_for(lambda: not pods(cluster, "proc-kill"), 60)
    assert not release.exists()


def phase(cluster: RealCluster, pod: str) -> str | None:
    found = [p for p in pods(cluster, pod.rsplit("-", 2)[0]) if p["metadata"]["name"] == pod]
    return str((found[0].get("status") or {}).get("phase")) if found else None


def logs(cluster: RealCluster, pod: str) -> list[str]:
    try:
        return pod_log(cluster, pod)
    except OSError:  # not started yet: 400 (container waiting) or 404
        return []


def pods(cluster: RealCluster, name: str) -> list[dict]:
    selector = f"training.kubeflow.org/job-name={name}"
    return list(cluster.get(f"/api/v1/namespaces/default/pods?labelSelector={selector}")["items"])


# MPIJob's addresses are in its hostfile ConfigMap, not in the env, and the launcher runs no mpirun here.
@pytest.mark.parametrize("case", [case for case in KINDS if case.kind != "MPIJob"], ids=str)
def test_every_address_the_operator_gives_is_mapped_to_this_machine(cluster, conn, case, tmp_path):
    """Each replica prints its whole environment: every variable whose stored value names a pod or Service of
    the job reached the process as 127.0.0.1 and local ports, although the agent learns of the job's pods
    and Services one watch event at a time. (Read from each finished pod's log: the job may succeed with its
    deciding replica while others still run, and the task log ends there.)"""
    name = f"proc-env-{case.plural[:-4]}"
    spec = {"spec": dict(case.spec)} if case.spec else {}
    manifest = job(case.kind, name, dict(case.replicas), ENVIRONMENT, tmp_path / name, **spec)

    result = run_released(operator(manifest), "sync", tmp_path / name)

    assert result["state"] == "Succeeded"
    named: dict[str, set[str]] = {}
    for pod in pods(cluster, name):
        pod_name = pod["metadata"]["name"]
        cluster.wait_for(lambda pod_name=pod_name: phase(cluster, pod_name) == "Succeeded", 60)
        (line,) = pod_log(cluster, pod_name)
        seen, stored = json.loads(line), pod_env(cluster, pod_name)
        named[pod_name] = {var for var, value in stored.items() if f"{name}-" in value}
        assert {var: seen[var] for var in named[pod_name] if f"{name}-" in seen[var]} == {}, (
            pod_name,
            stored,
        )
        assert seen["HOSTNAME"] == pod_name
    assert len(named) == sum(case.replicas.values()) and any(named.values()), named

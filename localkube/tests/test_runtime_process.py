"""The process pod runtime: containers run as local processes with the operator's env, cluster addresses
mapped to 127.0.0.1 and per-replica local ports, logs streamed live, exit codes reported, deletion killing."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from localkube.resources import NAMESPACES, PODS, SERVICES
from localkube.runtime.network import LocalNetwork
from localkube.store import Store
from test_controller_support import KubeClient, job, kc, replica

__all__ = ["kc"]

RENDEZVOUS = textwrap.dedent(
    """
    import os, pathlib, socket, time
    rank, addr, port = int(os.environ["RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} via {addr}:{port}", flush=True)
    if rank == 0:
        with socket.create_server((addr, port)) as server:
            print("master listening", flush=True)
            conn, _ = server.accept()
            with conn:
                print("master got:", conn.recv(100).decode(), flush=True)
                conn.sendall(b"welcome")
        release = pathlib.Path(os.environ["RELEASE"])
        while not release.exists():
            time.sleep(0.01)
        print("master done", flush=True)
    else:
        for _ in range(500):
            try:
                sock = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                time.sleep(0.02)
        with sock:
            sock.sendall(f"hello from rank {rank}".encode())
            print("worker got:", sock.recv(100).decode(), flush=True)
    """
)

TF_PS_WORKER = textwrap.dedent(
    """
    import json, os, socket, time
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    print("TF_CONFIG", json.dumps(config), flush=True)
    if task["type"] == "ps":
        host, port = config["cluster"]["ps"][task["index"]].rsplit(":", 1)
        with socket.create_server((host, int(port))) as server:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"parameters:" + conn.recv(100))
    else:
        host, port = config["cluster"]["ps"][0].rsplit(":", 1)
        for _ in range(500):
            try:
                sock = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError:
                time.sleep(0.02)
        with sock:
            sock.sendall(b"gradients")
            print("worker got", sock.recv(100).decode(), flush=True)
    """
)


@pytest.fixture
def localkube_runtime() -> str:
    return "process"


def python(script: str, **fields: Any) -> dict:
    return {"command": ["python", "-c", script], **fields}


def bare_pod(name: str, script: str, **container: Any) -> dict:
    main = {"name": "main", "image": "python:3.11", **python(script), **container}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [main], "restartPolicy": "Never"},
    }


def test_pytorch_master_and_worker_rendezvous_over_tcp_and_logs_follow_live(
    kc: KubeClient, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    env = [{"name": "RELEASE", "value": str(release)}]
    specs = {
        "Master": replica("pytorch", **python(RENDEZVOUS), env=env),
        "Worker": replica("pytorch", **python(RENDEZVOUS), env=env),
    }
    kc.create(job("PyTorchJob", "tcp", specs))
    kc.wait_pod("tcp-master-0", lambda p: p.status.phase == "Running")
    response = kc.core.read_namespaced_pod_log("tcp-master-0", "default", follow=True, _preload_content=False)
    received = b""
    chunks = response.read_chunked()
    while b"master got:" not in received:
        received += next(chunks)
    # The container is still running (it waits for the release file): the lines came live.
    assert kc.core.read_namespaced_pod("tcp-master-0", "default").status.phase == "Running"
    release.touch()
    received += b"".join(chunks)  # ends when the container terminates
    lines = received.decode().splitlines()
    assert lines[0].startswith("rank 0 of 2 via 127.0.0.1:")
    assert lines[1:] == ["master listening", "master got: hello from rank 1", "master done"]
    kc.wait_condition("PyTorchJob", "tcp", "Succeeded")
    worker_log = kc.log("tcp-worker-0")
    assert worker_log.splitlines()[0] == lines[0].replace("rank 0", "rank 1")  # same address and port
    assert "worker got: welcome" in worker_log
    pod = kc.core.read_namespaced_pod("tcp-worker-0", "default")
    assert (
        pod.spec.containers[0].env[-1].name == "PET_NNODES"
    )  # the stored env is the operator's, unrewritten
    assert {e.name: e.value for e in pod.spec.containers[0].env}["MASTER_ADDR"] == "tcp-master-0"


def test_tfjob_ps_and_worker_find_each_other_through_tf_config(kc: KubeClient) -> None:
    specs = {
        "PS": replica("tensorflow", restart_policy="Never", **python(TF_PS_WORKER)),
        "Worker": replica("tensorflow", restart_policy="Never", **python(TF_PS_WORKER)),
    }
    kc.create(job("TFJob", "tfps", specs))
    kc.wait_condition("TFJob", "tfps", "Succeeded")
    worker_log = kc.log("tfps-worker-0")
    assert "worker got parameters:gradients" in worker_log
    config = json.loads(worker_log.splitlines()[0].removeprefix("TF_CONFIG "))
    ps_address, worker_address = config["cluster"]["ps"][0], config["cluster"]["worker"][0]
    assert ps_address.startswith("127.0.0.1:") and worker_address.startswith("127.0.0.1:")
    assert ps_address != worker_address
    kc.wait_pod("tfps-ps-0", lambda p: p.status.phase == "Succeeded")
    assert (
        json.loads(kc.log("tfps-ps-0").splitlines()[0].removeprefix("TF_CONFIG "))["cluster"]
        == config["cluster"]
    )


def test_env_references_are_resolved(kc: KubeClient) -> None:
    kc.core.create_namespaced_config_map(
        "default", {"metadata": {"name": "settings"}, "data": {"lr": "0.1", "epochs": "3"}}
    )
    script = "import os; print(*(f'{k}={os.environ[k]}' for k in sorted(os.environ) if k.startswith('X_')))"
    env = [
        {"name": "X_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "X_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "X_LR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "lr"}}},
        {"name": "X_URL", "value": "http://$(X_IP):80/$(X_NONE)/$$"},
    ]
    kc.core.create_namespaced_pod(
        "default",
        bare_pod(
            "refs", script, env=env, envFrom=[{"prefix": "X_CM_", "configMapRef": {"name": "settings"}}]
        ),
    )
    kc.wait_pod("refs", lambda p: p.status.phase == "Succeeded")
    assert kc.log("refs").split() == [
        "X_CM_epochs=3",
        "X_CM_lr=0.1",
        "X_IP=127.0.0.1",
        "X_LR=0.1",
        "X_POD=refs",
        "X_URL=http://127.0.0.1:80/$(X_NONE)/$",
    ]


def test_python_is_this_interpreter_and_exit_codes_are_reported(kc: KubeClient) -> None:
    kc.core.create_namespaced_pod(
        "default", bare_pod("exe", "import sys; print(sys.executable); sys.exit(3)")
    )
    pod = kc.wait_pod("exe", lambda p: p.status.phase == "Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert kc.log("exe") == f"{sys.executable}\n"


def test_a_container_without_command_cannot_start(kc: KubeClient) -> None:
    pod = bare_pod("noexec", "")
    del pod["spec"]["containers"][0]["command"]
    kc.core.create_namespaced_pod("default", pod)
    failed = kc.wait_pod("noexec", lambda p: p.status.phase == "Failed")
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (128, "StartError")
    assert "Failed" in kc.reasons("noexec")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see processes")
def test_deleting_the_pod_kills_its_process_group(kc: KubeClient, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("started", flush=True)
        time.sleep(60)
        """
    )
    kc.core.create_namespaced_pod("default", bare_pod("sleeper", script))
    kc.wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, "the pid file")
    parent, child = (int(p) for p in pids.read_text().split())
    assert _alive(parent) and _alive(child)
    kc.core.delete_namespaced_pod("sleeper", "default")
    kc.wait_until(lambda: not _alive(parent) and not _alive(child), "the processes to end")


# -- address rewriting (no server) ----------------------------------------------------------------------
def _store_with(*names: str, pods: tuple[str, ...] = ()) -> Store:
    store = Store()
    store.create(NAMESPACES, "", {"metadata": {"name": "ns"}})
    for name in names:
        store.create(SERVICES, "ns", {"metadata": {"name": name}, "spec": {"clusterIP": "None"}})
    for name in pods:
        store.create(PODS, "ns", _pod(name))
    return store


def _pod(name: str, port: int | None = None) -> dict:
    ports = [{"name": "p", "containerPort": port}] if port else []
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "ports": ports}]},
    }


def test_rewriting_maps_every_spelling_of_a_service_to_one_local_port() -> None:
    network = LocalNetwork()
    rewrite = network.rewriter(_store_with("j-ps-0", "j-worker-0"), _pod("j-worker-0")).rewrite
    tf_config = {
        "cluster": {"ps": ["j-ps-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc.cluster.local:2222"]}
    }
    env = rewrite(
        {
            "TF_CONFIG": json.dumps(tf_config),
            "A": "j-ps-0:2222",
            "B": "j-ps-0.ns:2222,j-worker-0:2222",
            "C": "j-ps-0",
            "D": "other-host:2222 j-ps-0.elsewhere:2222",
        }
    )
    ps, worker = network.ports[("ns", "j-ps-0", 2222)], network.ports[("ns", "j-worker-0", 2222)]
    assert ps != worker
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}
    }
    assert env["A"] == f"127.0.0.1:{ps}"
    assert env["B"] == f"127.0.0.1:{ps},127.0.0.1:{worker}"
    assert env["C"] == "127.0.0.1"
    assert env["D"] == "other-host:2222 j-ps-0.elsewhere:2222"


def test_port_variables_follow_their_address_variable() -> None:
    network = LocalNetwork()
    store = _store_with(pods=("j-master-0", "j-scheduler-0"))  # Services not created yet: pods resolve too
    env = network.rewriter(store, _pod("j-worker-0")).rewrite(
        {
            "MASTER_ADDR": "j-master-0",
            "MASTER_PORT": "23456",
            "POD_NAME": "j-master-0",  # a name, not an address: left alone
            "MX_CONFIG": json.dumps({"cluster": {"scheduler": [{"url": "j-scheduler-0", "port": 9091}]}}),
            "DMLC_PS_ROOT_URI": "j-scheduler-0",
            "DMLC_PS_ROOT_PORT": "9091",
        }
    )
    master, scheduler = (
        network.ports[("ns", "j-master-0", 23456)],
        network.ports[("ns", "j-scheduler-0", 9091)],
    )
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["POD_NAME"]) == (
        "127.0.0.1",
        str(master),
        "j-master-0",
    )
    assert json.loads(env["MX_CONFIG"])["cluster"]["scheduler"] == [{"url": "127.0.0.1", "port": scheduler}]
    assert (env["DMLC_PS_ROOT_URI"], env["DMLC_PS_ROOT_PORT"]) == ("127.0.0.1", str(scheduler))


def test_own_pod_ip_with_a_container_port_maps_to_the_own_service_port() -> None:
    network = LocalNetwork()
    store = _store_with("p-worker-0")
    own = network.rewriter(store, _pod("p-worker-0", 36543)).rewrite({"PADDLE_MASTER": "127.0.0.1:36543"})
    peer = network.rewriter(store, _pod("p-worker-1", 36543)).rewrite({"PADDLE_MASTER": "p-worker-0:36543"})
    assert own == peer == {"PADDLE_MASTER": f"127.0.0.1:{network.ports[('ns', 'p-worker-0', 36543)]}"}


def test_a_pod_under_a_headless_service_has_ports_of_its_own() -> None:
    """JobSet's (and so a TrainJob's) rendezvous: `<hostname>.<headless service>`, every spelling."""
    network = LocalNetwork()
    store = _store_with("tj")  # the JobSet's headless Service; its pods may not exist yet
    env = network.rewriter(store, _pod("tj-node-0-1-abcde")).rewrite(
        {
            "PET_MASTER_ADDR": "tj-node-0-0.tj",
            "PET_MASTER_PORT": "29500",
            "HOSTS": "tj-node-0-0.tj.ns.svc:29500,tj-node-0-1.tj.ns.svc.cluster.local:29500",
            "ELSEWHERE": "tj-node-0-0.tj.other:29500",
        }
    )
    node0, node1 = (
        network.ports[("ns", "tj-node-0-0.tj", 29500)],
        network.ports[("ns", "tj-node-0-1.tj", 29500)],
    )
    assert node0 != node1
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("127.0.0.1", str(node0))
    assert env["HOSTS"] == f"127.0.0.1:{node0},127.0.0.1:{node1}"
    assert env["ELSEWHERE"] == "tj-node-0-0.tj.other:29500"  # no Service tj in namespace other

"""T9k DeepSpeedJob, MPIJob and ColossalAIJob (tensorstack-t9k.md §3, §4, §6) in both spec shapes, through the
real `kubernetes` client: pod names and labels, the deciding replica (worker 0, the launcher), the status the
docs' real controller output shows on success and failure, restarts, cleanUpWorkers and debug mode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.controllers.tensorstack_siblings import SiblingController
from test_controller_builtin import running
from test_controller_support import SCRIPT, KubeClient
from test_controller_tensorstack import (
    API_VERSION,
    SUCCESS,
    conditions,
    create,
    pods,
    until_phase,
)


def job(kind: str, name: str, script: dict, spec: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "annotations": {SCRIPT: json.dumps(script)}},
        "spec": spec,
    }


def template(container: str, command: list[str] | None = None) -> dict:
    main: dict[str, Any] = {"name": container, "image": "t9kpublic/example:1"}
    if command:
        main["command"] = command
    return {"spec": {"containers": [main]}}


def deepspeed(name: str, script: dict, **spec: Any) -> dict:
    """Two workers whose worker 0 runs `deepspeed ... train.py` from `config.run.python`."""
    config = {"slotsPerWorker": 1, "run": {"python": ["/t9k/mnt/train.py", "--epochs=1"]}}
    worker = {"replicas": 2, "template": template("worker", ["sleep", "inf"])}
    return job("DeepSpeedJob", name, script, {"config": config, "worker": worker, **spec})


def messages(final: dict) -> dict[str, str]:
    return {c["type"]: c["message"] for c in final["status"]["conditions"]}


def labels(pod: object) -> dict[str, str]:
    return pod.metadata.labels  # type: ignore[attr-defined]


def command(pod: object) -> list[str]:
    return pod.spec.containers[0].command  # type: ignore[attr-defined]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, SiblingController()) as kube:
        yield kube


def test_deepspeed_succeeds_when_worker_0_does_while_the_others_run(kube: KubeClient) -> None:
    body = deepspeed("ds-ok", {"worker-0": {"duration": 0.1}, "default": {"duration": None}})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final) == SUCCESS
    (task,) = final["status"]["tasks"]
    assert task["type"] == "worker" and [r["phase"] for r in task["replicas"]] == ["Succeeded", "Running"]
    assert final["status"]["backoffCount"] == 0
    found = pods(kube, "ds-ok")
    assert sorted(found) == ["ds-ok-worker-0", "ds-ok-worker-1"]
    assert [r["name"] for r in task["replicas"]] == ["ds-ok-worker-0", "ds-ok-worker-1"]
    assert labels(found["ds-ok-worker-1"]) == {"tensorstack.dev/owner-name": "ds-ok"}
    assert command(found["ds-ok-worker-0"]) == [
        "deepspeed",
        "--hostfile",
        "/t9k/hostfile",
        "/t9k/mnt/train.py",
        "--epochs=1",
    ]
    assert command(found["ds-ok-worker-1"]) == ["sleep", "inf"]  # the template's own command


def test_deepspeed_launcher_options_and_custom_command(kube: KubeClient) -> None:
    config = {
        "localRank": False,
        "autotune": "tune",
        "otherArgs": ["--num_gpus=1"],
        "run": {"module": ["pkg.train"]},
    }
    create(kube, deepspeed("ds-module", {"default": {"duration": None}}, config=config))
    create(
        kube,
        deepspeed("ds-custom", {"default": {"duration": None}}, config={"customCommand": "deepspeed x.py"}),
    )
    module = kube.wait_pod("ds-module-worker-0", lambda p: True)
    custom = kube.wait_pod("ds-custom-worker-0", lambda p: True)
    assert command(module) == [
        "deepspeed",
        "--hostfile",
        "/t9k/hostfile",
        "--no_local_rank",
        "--autotuning",
        "tune",
        "--num_gpus=1",
        "--module",
        "pkg.train",
    ]
    assert command(custom) == ["sh", "-c", "deepspeed x.py"]


def test_deepspeed_failure_of_worker_0_as_the_real_controller_reports_it(kube: KubeClient) -> None:
    script = {"worker-0": {"duration": 0.05, "exit_code": 137}, "default": {"duration": None}}
    body = deepspeed("ds-fail", script, runPolicy={"backoffLimit": 1})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    assert conditions(final) == {
        "Initialized": ("True", "-"),
        "Running": ("False", "Failed"),
        "ReplicaFailure": ("True", "Failed"),
        "Completed": ("True", "Failed"),
        "Failed": ("True", "Failed"),
    }
    message = "DeepSpeedJob ds-fail has failed: ds-fail-worker-0 failed with exit code 137"
    assert {messages(final)[t] for t in ("Running", "ReplicaFailure", "Completed", "Failed")} == {message}
    # OnFailure (the default) restarted worker 0 once: the backoff limit was used up by then.
    assert final["status"]["backoffCount"] == 1 and final["status"]["tasks"][0]["restartCount"] == 1
    worker_0 = final["status"]["tasks"][0]["replicas"][0]
    assert worker_0["containers"] == [{"name": "worker", "state": "Terminated", "exitCode": 137}]


def test_deepspeed_other_worker_failing_does_not_decide(kube: KubeClient) -> None:
    script = {"worker-1": {"duration": 0.05, "exit_code": 2}, "worker-0": {"duration": 0.3}}
    body = deepspeed(
        "ds-w1", script, worker={"replicas": 2, "restartPolicy": "Never", "template": template("worker")}
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    worker_0, worker_1 = final["status"]["tasks"][0]["replicas"]
    assert (worker_0["phase"], worker_1["phase"]) == ("Succeeded", "Failed")
    assert worker_1["containers"][0]["exitCode"] == 2


def test_deepspeed_debug_mode_runs_sshd(kube: KubeClient) -> None:
    body = deepspeed("ds-debug", {"default": {"duration": 0.05}}, runMode={"debug": {"enabled": True}})
    create(kube, body)
    until_phase(kube, body, "Running")
    pod = kube.wait_pod("ds-debug-worker-0", lambda p: p.status.phase == "Running")
    assert command(pod) == ["/usr/sbin/sshd", "-D"]


def mpi_2024(name: str, script: dict) -> dict:
    worker = {
        "replicas": 2,
        "extraMPIArgs": ["-N", "1"],
        "cmd": ["python3", "/t9k/mnt/main.py"],
        "template": template("mpi-worker"),
    }
    spec = {
        "worker": worker,
        "mca": {"btl": "^openib"},
        "mpiHome": "/usr/local",
        "ssh": {"sshAuthMountPath": "/root/.ssh", "sshdPath": "/usr/sbin/sshd"},
        "runPolicy": {"cleanUpWorkers": True},
    }
    return job("MPIJob", name, script, spec)


def test_mpijob_2024_launcher_decides_and_clean_up_workers_deletes_them(kube: KubeClient) -> None:
    body = mpi_2024("mpi-ok", {"launcher": {"duration": 0.2}, "default": {"duration": None}})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final) == SUCCESS
    assert "backoffCount" not in final["status"]
    assert [t["type"] for t in final["status"]["tasks"]] == ["launcher", "worker"]
    launcher = pods(kube, "mpi-ok")["mpi-ok-launcher"]
    assert command(launcher) == [
        "/usr/local/bin/mpirun",
        "--host",
        "mpi-ok-worker-0.default.svc,mpi-ok-worker-1.default.svc",
        "--mca",
        "btl",
        "^openib",
        "-N",
        "1",
        "python3",
        "/t9k/mnt/main.py",
    ]
    names = [r["name"] for t in final["status"]["tasks"] for r in t["replicas"]]
    assert names == ["mpi-ok-launcher", "mpi-ok-worker-0", "mpi-ok-worker-1"]
    assert labels(launcher) == {"tensorstack.dev/owner-name": "mpi-ok"}
    kube.wait_until(lambda: set(pods(kube, "mpi-ok")) == {"mpi-ok-launcher"}, "the workers to be cleaned up")
    assert pods(kube, "mpi-ok")["mpi-ok-launcher"].status.phase == "Succeeded"  # type: ignore[attr-defined]


def replica_specs_2025(launcher_restarts: dict) -> list[dict]:
    return [
        {
            "type": "launcher",
            "replicas": 1,
            "restartPolicy": launcher_restarts,
            "template": template("launcher"),
        },
        {"type": "worker", "replicas": 1, "template": template("worker")},
    ]


def test_mpijob_2025_launcher_failure_fails_the_job(kube: KubeClient) -> None:
    spec = {
        "mpiConfig": {"script": ["python3", "main.py"], "extraArgs": ["--oversubscribe"]},
        "replicaSpecs": replica_specs_2025({"policy": "Never"}),
    }
    body = job(
        "MPIJob",
        "mpi-fail",
        {"launcher": {"duration": 0.1, "exit_code": 2}, "default": {"duration": None}},
        spec,
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    true = {t for t, (status, _) in conditions(final).items() if status == "True"}
    assert true == {"Initialized", "ReplicaFailure", "Completed", "Failed"}
    assert (
        messages(final)["Failed"] == "MPIJob mpi-fail has failed: mpi-fail-launcher failed with exit code 2"
    )
    assert messages(final)["ReplicaFailure"] == "Pod[mpi-fail-launcher] exited with error code 2"
    launcher = final["status"]["tasks"][0]["replicas"][0]
    assert (launcher["name"], launcher["phase"]) == ("mpi-fail-launcher", "Failed")
    pod = pods(kube, "mpi-fail")["mpi-fail-launcher"]
    assert command(pod) == [
        "mpirun",
        "--host",
        "mpi-fail-worker-0.default.svc",
        "--oversubscribe",
        "python3",
        "main.py",
    ]
    assert set(pods(kube, "mpi-fail")) == {"mpi-fail-launcher", "mpi-fail-worker-0"}  # no cleanUpWorkers


def test_mpijob_2025_restart_policy_limit_replaces_the_launcher(kube: KubeClient) -> None:
    spec = {"replicaSpecs": replica_specs_2025({"policy": "OnFailure", "limit": 1})}
    script = {
        "launcher": {"duration": 0.05, "attempts": [{"exit_code": 1}, {"exit_code": 0}]},
        "default": {"duration": None},
    }
    body = job("MPIJob", "mpi-retry", script, spec)
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert final["status"]["tasks"][0]["restartCount"] == 1 and "backoffCount" not in final["status"]


def test_mpijob_debug_mode_commands(kube: KubeClient) -> None:
    body = mpi_2024("mpi-debug", {"default": {"duration": 0.05}})
    body["spec"]["runMode"] = {"debug": {"enabled": True}}
    create(kube, body)
    until_phase(kube, body, "Running")
    launcher = kube.wait_pod("mpi-debug-launcher", lambda p: p.status.phase == "Running")
    worker = kube.wait_pod("mpi-debug-worker-1", lambda p: p.status.phase == "Running")
    assert (command(launcher), command(worker)) == (["sleep", "inf"], ["/usr/bin/sshd", "-D"])


def test_colossalai_2024_launcher_from_its_block_decides(kube: KubeClient) -> None:
    spec = {
        "ssh": {"authMountPath": "/root/.ssh", "sshdPath": "/usr/sbin/sshd"},
        "launcher": {
            "image": "t9kpublic/colossalai:launcher",
            "workingDir": "/t9k/mnt",
            "env": [{"name": "A", "value": "1"}],
        },
        "worker": {
            "replicas": 2,
            "procPerWorker": 4,
            "command": ["train.py", "--config", "config.py"],
            "torchArgs": ["--master_port", "29500"],
            "template": template("worker"),
        },
    }
    body = job(
        "ColossalAIJob", "cai-ok", {"launcher": {"duration": 0.2}, "default": {"duration": None}}, spec
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final) == SUCCESS
    found = pods(kube, "cai-ok")
    assert sorted(found) == ["cai-ok-launcher", "cai-ok-worker-0", "cai-ok-worker-1"]
    launcher = found["cai-ok-launcher"].spec.containers[0]  # type: ignore[attr-defined]
    assert (launcher.name, launcher.image, launcher.working_dir) == (
        "launcher",
        "t9kpublic/colossalai:launcher",
        "/t9k/mnt",
    )
    assert launcher.command == [
        "colossalai",
        "run",
        "--nproc_per_node",
        "4",
        "--host",
        "cai-ok-worker-0.default.svc,cai-ok-worker-1.default.svc",
        "--master_port",
        "29500",
        "train.py",
        "--config",
        "config.py",
    ]
    assert {r["phase"] for r in final["status"]["tasks"][1]["replicas"]} == {"Running"}  # workers kept


def test_colossalai_2025_launcher_failure_fails_the_job(kube: KubeClient) -> None:
    spec = {
        "torchConfig": {"procPerWorker": 2, "script": ["train.py"]},
        "replicaSpecs": replica_specs_2025({"policy": "Never"}),
        "runPolicy": {"cleanUpWorkers": True},
    }
    body = job(
        "ColossalAIJob",
        "cai-fail",
        {"launcher": {"duration": 0.1, "exit_code": 1}, "default": {"duration": None}},
        spec,
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    assert conditions(final)["Completed"] == ("True", "Failed") and conditions(final)["Failed"] == (
        "True",
        "Failed",
    )
    assert (
        messages(final)["Failed"]
        == "ColossalAIJob cai-fail has failed: cai-fail-launcher failed with exit code 1"
    )
    kube.wait_until(
        lambda: set(pods(kube, "cai-fail")) == {"cai-fail-launcher"}, "the workers to be cleaned up"
    )

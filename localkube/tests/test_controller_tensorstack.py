"""T9k training jobs (tensorstack-t9k.md) on the upstream tutorial examples, through the real `kubernetes`
client: success by the deciding replica, failure with Failed=True AND Completed=True, restarts, pause and
resume, debug mode and cleanUpPolicy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from localkube.controllers.tensorstack import TensorStackController
from test_controller_builtin import running, watch_custom
from test_controller_support import SCRIPT, KubeClient

# t9k/tutorial-examples job/: pytorchtrainingjob/ddp/job_cpu.yaml, tensorflowtrainingjob/multiworker/job.yaml,
# tensorflowtrainingjob/ps/job.yaml (the three replica specs' containers are the same), xgboosttrainingjob/
# distributed/job.yaml, debug/job_debug.yaml; volumes and resources left out (localkube ignores them).
PYTORCH_DDP = """
apiVersion: batch.tensorstack.dev/v1beta1
kind: PyTorchTrainingJob
metadata:
  name: torch-mnist-trainingjob
spec:
  tensorboardSpec:
    trainingLogFilesets:
      - t9k://pvc/tutorial/tutorial-examples/job/pytorchtrainingjob/ddp/log
    image: t9kpublic/tensorflow-2.11.0:cpu-sdk-0.5.2
  torchrunConfig:
    enabled: true
    maxRestarts: 3
    procPerNode: "4"
    rdzvBackend: c10d
  replicaSpecs:
    - type: node
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          securityContext:
            runAsUser: 1000
          containers:
            - name: pytorch
              args: [torch_mnist_trainingjob.py, "--save_path", "model_state_dict.pt", "--log_dir", "log",
                     "--backend", "gloo", "--no_cuda"]
              workingDir: /t9k/mnt/tutorial-examples/job/pytorchtrainingjob/ddp
              image: t9kpublic/pytorch-1.13.0:sdk-0.5.2
"""
TF_MULTIWORKER = """
apiVersion: batch.tensorstack.dev/v1beta1
kind: TensorFlowTrainingJob
metadata:
  name: keras-mnist-trainingjob
spec:
  replicaSpecs:
    - type: worker
      replicas: 4
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: tensorflow
              command: [python, keras_mnist_trainingjob.py, "--log_dir", "log", "--no_cuda"]
              workingDir: /t9k/mnt/tutorial-examples/job/tensorflowtrainingjob/multiworker
              image: t9kpublic/tensorflow-2.11.0:cpu-sdk-0.5.2
"""
TF_CONTAINER = """
          containers:
            - command: [python, keras_mnist_trainingjob_ps.py, "--log_dir", "log", "--no_cuda"]
              workingDir: /t9k/mnt/tutorial-examples/job/tensorflowtrainingjob/ps
              image: t9kpublic/tensorflow-2.11.0:cpu-sdk-0.5.2
              name: tensorflow
"""
TF_PS = f"""
apiVersion: batch.tensorstack.dev/v1beta1
kind: TensorFlowTrainingJob
metadata:
  name: keras-mnist-trainingjob-ps
spec:
  replicaSpecs:
    - type: chief
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:{TF_CONTAINER}
    - type: ps
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:{TF_CONTAINER}
    - type: worker
      replicas: 4
      restartPolicy: ExitCode
      template:
        spec:{TF_CONTAINER}
"""
XGBOOST_CONTAINER = """
          containers:
            - name: xgboost
              command: [python3, job/xgboosttrainingjob/distributed/main.py,
                        "--xgboost_parameter=objective:multi:softprob,num_class:3", --n_estimators=10,
                        --learning_rate=0.1, --model_path=job/xgboosttrainingjob/distributed/]
              workingDir: /t9k/mnt/tutorial-examples
              image: t9kpublic/xgboost-1.7.3:sdk-0.5.2
              ports:
                - containerPort: 9991
                  name: xgboost-port
"""
XGBOOST = f"""
apiVersion: batch.tensorstack.dev/v1beta1
kind: XGBoostTrainingJob
metadata:
  name: xgb-iris-trainingjob
spec:
  replicaSpecs:
    - type: master
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:{XGBOOST_CONTAINER}
    - type: worker
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:{XGBOOST_CONTAINER}
"""
DEBUG = """
apiVersion: batch.tensorstack.dev/v1beta1
kind: PyTorchTrainingJob
metadata:
  name: torch-mnist-trainingjob-debug
spec:
  runMode:
    debug:
      enabled: true
      replicaSpecs:
        - type: worker
          skipInitContainer: true
          command: ["sleep", "inf"]
  torchrunConfig:
    enabled: true
    maxRestarts: 3
    procPerNode: "4"
    rdzvBackend: c10d
  replicaSpecs:
    - type: worker
      replicas: 1
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: pytorch
              args: [torch_mnist_trainingjob.py, "--save_path", "model_state_dict.pt", "--log_dir", "log",
                     "--backend", "nccl"]
              workingDir: /t9k/mnt/tutorial-examples/job/debug
              image: t9kpublic/pytorch-1.13.0:sdk-0.5.2
"""
API_VERSION = "batch.tensorstack.dev/v1beta1"
SUCCESS = {  # the docs' real controller output on success (name -> status, reason)
    "Initialized": ("True", "-"),
    "Running": ("False", "Succeeded"),
    "ReplicaFailure": ("False", "Finished"),
    "Completed": ("True", "Succeeded"),
    "Failed": ("False", "Succeeded"),
}


def manifest(text: str, script: dict | None = None, **run_policy: str) -> dict:
    loaded = yaml.safe_load(text)
    if script is not None:
        loaded["metadata"]["annotations"] = {SCRIPT: json.dumps(script)}
    if run_policy:
        loaded["spec"]["runPolicy"] = run_policy
    return loaded


def plural(body: dict) -> str:
    return body["kind"].lower() + "s"


def create(kube: KubeClient, body: dict) -> dict:
    return kube.custom.create_namespaced_custom_object(
        "batch.tensorstack.dev", "v1beta1", "default", plural(body), body
    )


def until(kube: KubeClient, body: dict, check: Callable[[dict], bool]) -> list[dict]:
    return watch_custom(kube, API_VERSION, plural(body), body["metadata"]["name"], check)


def until_phase(kube: KubeClient, body: dict, *phases: str) -> dict:
    return until(kube, body, lambda j: (j.get("status") or {}).get("phase") in phases)[-1]


def conditions(job: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in job["status"].get("conditions") or []}


def pods(kube: KubeClient, job: str) -> dict[str, object]:
    found = kube.core.list_namespaced_pod("default", label_selector=f"tensorstack.dev/owner-name={job}").items
    return {p.metadata.name: p for p in found}


def env(pod: object) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}  # type: ignore[attr-defined]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, TensorStackController()) as kube:
        yield kube


def test_pytorch_ddp_example_succeeds(kube: KubeClient) -> None:
    body = manifest(PYTORCH_DDP)
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final) == SUCCESS
    (task,) = final["status"]["tasks"]
    (replica,) = task["replicas"]
    assert (task["type"], task["restartCount"], replica["name"], replica["phase"]) == (
        "node",
        0,
        "torch-mnist-trainingjob-node-0",
        "Succeeded",
    )
    assert replica["containers"] == [{"name": "pytorch", "state": "Terminated", "exitCode": 0}]
    assert final["status"]["aggregate"]["succeeded"] == 1 and final["status"]["backoffCount"] == 0
    pod = pods(kube, "torch-mnist-trainingjob")["torch-mnist-trainingjob-node-0"]
    assert replica["uid"] == pod.metadata.uid  # type: ignore[attr-defined]
    assert pod.metadata.labels == {"tensorstack.dev/owner-name": "torch-mnist-trainingjob"}  # type: ignore[attr-defined]
    assert pod.spec.restart_policy == "Never"  # type: ignore[attr-defined]
    assert env(pod) == {
        "MASTER_ADDR": "torch-mnist-trainingjob-node-0",
        "MASTER_PORT": "23456",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    container = pod.spec.containers[0]  # type: ignore[attr-defined]
    assert container.command[0] == "torchrun" and "--nproc_per_node=4" in container.command
    assert container.args[0] == "torch_mnist_trainingjob.py"
    (service,) = kube.core.list_namespaced_service("default").items
    assert (service.metadata.name, service.spec.cluster_ip) == ("torch-mnist-trainingjob-node-0", "None")


def test_tensorflow_multiworker_example_succeeds_with_worker_0(kube: KubeClient) -> None:
    body = manifest(TF_MULTIWORKER, {"worker-0": {"duration": 0.1}, "default": {"duration": 0.3}})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    found = pods(kube, "keras-mnist-trainingjob")
    assert sorted(found) == [f"keras-mnist-trainingjob-worker-{i}" for i in range(4)]
    config = json.loads(env(found["keras-mnist-trainingjob-worker-2"])["TF_CONFIG"])
    hosts = [f"keras-mnist-trainingjob-worker-{i}.default.svc:2222" for i in range(4)]
    assert config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 2}}


def test_tensorflow_ps_example_succeeds_with_the_chief_and_keeps_ps_by_default(kube: KubeClient) -> None:
    body = manifest(TF_PS, {"ps": {"duration": None}})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    tasks = {t["type"]: t for t in final["status"]["tasks"]}
    assert list(tasks) == ["chief", "ps", "worker"]
    assert tasks["chief"]["replicas"][0]["phase"] == "Succeeded"
    assert {r["phase"] for r in tasks["ps"]["replicas"]} == {"Running"}
    found = pods(kube, "keras-mnist-trainingjob-ps")
    assert len(found) == 7
    config = json.loads(env(found["keras-mnist-trainingjob-ps-ps-1"])["TF_CONFIG"])
    assert sorted(config["cluster"]) == ["chief", "ps", "worker"]
    assert config["task"] == {"type": "ps", "index": 1}


def test_clean_up_policy_unfinished_deletes_the_running_ps(kube: KubeClient) -> None:
    script = {"ps": {"duration": None}, "chief": {"duration": 0.4}, "worker": {"duration": 0.05}}
    body = manifest(TF_PS, script, cleanUpPolicy="Unfinished")
    create(kube, body)

    def ps_deleted(job: dict) -> bool:
        tasks = {t["type"]: t for t in (job.get("status") or {}).get("tasks") or []}
        return {r["phase"] for r in tasks.get("ps", {}).get("replicas") or [{}]} == {"Deleted"}

    final = until(kube, body, ps_deleted)[-1]
    assert final["status"]["phase"] == "Succeeded"
    assert final["status"]["tasks"][0]["replicas"][0]["phase"] == "Succeeded"
    kube.wait_until(lambda: len(pods(kube, "keras-mnist-trainingjob-ps")) == 5, "the ps pods to go")
    remaining = pods(kube, "keras-mnist-trainingjob-ps").values()
    assert {p.status.phase for p in remaining} == {"Succeeded"}  # type: ignore[attr-defined]


def test_clean_up_policy_all_deletes_every_pod(kube: KubeClient) -> None:
    body = manifest(XGBOOST, cleanUpPolicy="All")
    create(kube, body)
    assert until_phase(kube, body, "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    kube.wait_until(lambda: not pods(kube, "xgb-iris-trainingjob"), "every pod to go")
    kube.wait_until(lambda: not kube.core.list_namespaced_service("default").items, "every service to go")


def test_xgboost_example_succeeds_with_master_env(kube: KubeClient) -> None:
    body = manifest(XGBOOST, {"worker": {"duration": None}})
    create(kube, body)
    assert until_phase(kube, body, "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    worker = pods(kube, "xgb-iris-trainingjob")["xgb-iris-trainingjob-worker-0"]
    assert env(worker) == {
        "MASTER_ADDR": "xgb-iris-trainingjob-master-0",
        "MASTER_PORT": "9991",
        "RANK": "1",
        "WORLD_SIZE": "2",
    }


def test_failed_master_sets_failed_and_completed(kube: KubeClient) -> None:
    body = manifest(XGBOOST, {"master": {"duration": 0.05, "exit_code": 1}, "worker": {"duration": None}})
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    assert conditions(final) == {
        "Initialized": ("True", "-"),
        "Running": ("False", "Failed"),
        "ReplicaFailure": ("True", "ErrorInPod"),
        "Completed": ("True", "Failed"),
        "Failed": ("True", "Failed"),
    }
    messages = {c["type"]: c["message"] for c in final["status"]["conditions"]}
    assert messages["Failed"] == (
        "XGBoostTrainingJob xgb-iris-trainingjob has failed: "
        "xgb-iris-trainingjob-master-0 failed with exit code 1"
    )
    assert messages["ReplicaFailure"] == "Pod[xgb-iris-trainingjob-master-0] exited with error code 1"
    master = final["status"]["tasks"][0]["replicas"][0]
    assert master["containers"] == [{"name": "xgboost", "state": "Terminated", "exitCode": 1}]
    assert final["status"]["backoffCount"] == 0  # exit code 1 is not retryable under ExitCode


def test_retryable_exit_code_restarts_the_replica(kube: KubeClient) -> None:
    script = {"master": {"duration": 0.05, "attempts": [{"exit_code": 137}, {"exit_code": 0}]}}
    body = manifest(XGBOOST, script)
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert final["status"]["backoffCount"] == 1
    assert final["status"]["tasks"][0]["restartCount"] == 1
    assert conditions(final)["ReplicaFailure"] == ("False", "Finished")


def test_backoff_limit_ends_restarts(kube: KubeClient) -> None:
    body = manifest(XGBOOST, {"master": {"duration": 0.05, "exit_code": 143}}, backoffLimit=1)  # type: ignore[arg-type]
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed" and final["status"]["backoffCount"] == 1


def test_pause_deletes_pods_and_resume_recreates_them(kube: KubeClient) -> None:
    body = manifest(PYTORCH_DDP, {"default": {"duration": None}})
    create(kube, body)
    until_phase(kube, body, "Running")
    group, name = (
        ("batch.tensorstack.dev", "v1beta1", "default", "pytorchtrainingjobs"),
        "torch-mnist-trainingjob",
    )
    kube.custom.patch_namespaced_custom_object(
        *group, name, {"spec": {"runMode": {"pause": {"enabled": True}}}}
    )
    paused = until_phase(kube, body, "Paused")
    assert conditions(paused)["Paused"] == ("True", "Paused")
    assert conditions(paused)["Running"][0] == "False"
    kube.wait_until(lambda: not pods(kube, name), "the paused job's pods to go")
    kube.custom.patch_namespaced_custom_object(
        *group, name, {"spec": {"runMode": {"pause": {"enabled": False}}}}
    )
    seen = until(kube, body, lambda j: (j.get("status") or {}).get("phase") == "Running")
    assert "Resuming" in [s["status"]["phase"] for s in seen]
    assert conditions(seen[-1])["Paused"] == ("False", "Resumed")
    assert set(pods(kube, name)) == {"torch-mnist-trainingjob-node-0"}


def test_debug_mode_sleeps_and_never_finishes(kube: KubeClient) -> None:
    # The job's own script would end every replica after 0.1 s; in debug mode the pods sleep instead.
    body = manifest(DEBUG, {"default": {"duration": 0.1}})
    create(kube, body)
    until_phase(kube, body, "Running")
    pod = kube.wait_pod("torch-mnist-trainingjob-debug-worker-0", lambda p: p.status.phase == "Running")
    assert pod.spec.containers[0].command == ["sleep", "inf"] and pod.spec.containers[0].args is None
    started = pod.status.container_statuses[0].state.running.started_at

    def slept_past_script() -> bool:
        return (datetime.now(UTC) - started).total_seconds() > 0.5

    kube.wait_until(slept_past_script, "the scripted duration to pass")
    time.sleep(0.1)  # let any (wrong) completion reach the controller
    job = kube.custom.get_namespaced_custom_object(
        "batch.tensorstack.dev", "v1beta1", "default", "pytorchtrainingjobs", "torch-mnist-trainingjob-debug"
    )
    assert job["status"]["phase"] == "Running"
    assert "Completed" not in {t for t, (s, _) in conditions(job).items() if s == "True"}
    assert kube.read_pod("torch-mnist-trainingjob-debug-worker-0").status.phase == "Running"  # type: ignore[union-attr]

"""The two legacy MXNet operators (legacy-mxnet.md B1, B2) on their upstream examples, through the real
`kubernetes` client: children, labels, DMLC env, `phase`/`state`, and the chief deciding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localkube.controllers.builtin import BatchJobController
from localkube.controllers.mxnet_legacy import LegacyMxnetController
from test_controller_builtin import running, watch_custom
from test_controller_support import SCRIPT, KubeClient

# deepinsight/mxnet-operator examples/mx_job_dist.yaml and mx_job_local.yaml; kubeflow/mxnet-operator 8d73e16
# examples/mx_job_dist.yaml: unchanged (long flow lists wrapped).
MLKUBE_DIST = """
apiVersion: "mxnet.mlkube.io/v1beta1"
kind: "MxJob"
metadata:
  name: "example-dist-job"
spec:
  jobMode: "dist"
  replicaSpecs:
    - replicas: 1
      mxReplicaType: SCHEDULER
      PsRootPort: 9091
      template:
        spec:
          containers:
            - image: 10.199.192.16/library/mxnet-gpu-dist:0.12.0
              name: mxnet
              command: ["python"]
              args: ["train_cifar10.py"]
              workingDir: "/mxnet/example/image-classification"
          restartPolicy: OnFailure
    - replicas: 2
      mxReplicaType: SERVER
      template:
        spec:
          containers:
            - image: 10.199.192.16/library/mxnet-gpu-dist:0.12.0
              name: mxnet
              command: ["python"]
              args: ["train_cifar10.py"]
              workingDir: "/mxnet/example/image-classification"
          restartPolicy: OnFailure
    - replicas: 3
      mxReplicaType: WORKER
      template:
        spec:
          containers:
            - image: 10.199.192.16/library/mxnet-gpu-dist:0.12.0
              name: mxnet
              command: ["python"]
              args: ["train_cifar10.py","--num-epochs=10","--gpus=0","--num-layers=2",
                     "--kv-store=dist_device_sync"]
              workingDir: "/mxnet/example/image-classification"
              resources:
                limits:
                  alpha.kubernetes.io/nvidia-gpu: 1
          restartPolicy: OnFailure
"""
MLKUBE_LOCAL = """
apiVersion: "mxnet.mlkube.io/v1beta1"
kind: "MxJob"
metadata:
  name: "example-local-job"
spec:
  jobMode: "local"
  replicaSpecs:
    - replicas: 1
      mxReplicaType: WORKER
      template:
        spec:
          containers:
            - image: 10.199.192.16/library/mxnet-gpu-local:0.12.0
              name: mxnet
              command: ["python"]
              args: ["train_cifar10.py","--num-epochs=10","--gpus=0","--model-prefix=./wltest",
                     "--num-layers=2"]
              workingDir: "/mxnet/example/image-classification"
              resources:
                limits:
                  alpha.kubernetes.io/nvidia-gpu: 1
          restartPolicy: OnFailure
"""
KUBEFLOW_DIST = """
apiVersion: "kubeflow.org/v1alpha1"
kind: "MXJob"
metadata:
  name: "gpu-dist-job"
spec:
  jobMode: "dist"
  replicaSpecs:
    - replicas: 1
      mxReplicaType: SCHEDULER
      PsRootPort: 9000
      template:
        spec:
          containers:
            - image: mxjob/mxnet:gpu
              name: mxnet
          restartPolicy: OnFailure
    - replicas: 2
      mxReplicaType: SERVER
      template:
        spec:
          containers:
            - image: mxjob/mxnet:gpu
              name: mxnet
          restartPolicy: OnFailure
    - replicas: 2
      mxReplicaType: WORKER
      template:
        spec:
          containers:
            - image: mxjob/mxnet:gpu
              name: mxnet
              command: ["python"]
              args: ["/incubator-mxnet/example/image-classification/train_mnist.py","--num-epochs","1",
                     "--num-layers","2","--kv-store","dist_device_sync","--gpus","0,1"]
              resources:
                limits:
                  nvidia.com/gpu: 2
          restartPolicy: OnFailure
"""
MLKUBE_API, KUBEFLOW_API = "mxnet.mlkube.io/v1beta1", "kubeflow.org/v1alpha1"


def manifest(text: str, script: dict | None = None) -> dict:
    loaded = yaml.safe_load(text)
    if script is not None:
        loaded["metadata"]["annotations"] = {SCRIPT: json.dumps(script)}
    return loaded


def create(kube: KubeClient, body: dict) -> dict:
    group, version = body["apiVersion"].split("/")
    return kube.custom.create_namespaced_custom_object(group, version, "default", "mxjobs", body)


def until_phase(kube: KubeClient, api: str, name: str, *phases: str, since: dict | None = None) -> list[dict]:
    """States until the phase is one of `phases`; every state after `since` (a create's answer) if given."""
    version = since["metadata"]["resourceVersion"] if since else None
    done = lambda j: (j.get("status") or {}).get("phase") in phases  # noqa: E731
    return watch_custom(kube, api, "mxjobs", name, done, resource_version=version)


def phases(seen: list[dict]) -> list[str]:
    out: list[str] = []
    for state in seen:
        value = (state.get("status") or {}).get("phase")
        if value and (not out or out[-1] != value):
            out.append(value)
    return out


def env(container: client.V1Container) -> dict[str, str]:
    return {e.name: e.value for e in container.env or []}


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, BatchJobController(), LegacyMxnetController()) as kube:
        yield kube


def test_mlkube_dist_example_succeeds_with_the_scheduler(kube: KubeClient) -> None:
    created = create(kube, manifest(MLKUBE_DIST))
    seen = until_phase(kube, MLKUBE_API, "example-dist-job", "Done", "Failed", since=created)
    assert phases(seen)[:2] == ["Creating", "Running"] and phases(seen)[-1] == "Done"
    final = seen[-1]
    assert final["status"]["state"] == "Succeeded" and final["status"]["controlPaused"] is False
    rid = final["spec"]["RuntimeId"]
    assert len(rid) == 4
    statuses = {s["Mx_replica_type"]: s for s in final["status"]["replicaStatuses"]}
    assert statuses["SCHEDULER"]["state"] == "Succeeded"
    jobs = {j.metadata.name: j for j in client.BatchV1Api(kube.api).list_namespaced_job("default").items}
    expected = [f"example-dist-job-scheduler-{rid}-0"]
    expected += [f"example-dist-job-server-{rid}-{i}" for i in range(2)]
    expected += [f"example-dist-job-worker-{rid}-{i}" for i in range(3)]
    assert sorted(jobs) == sorted(expected)
    worker = jobs[f"example-dist-job-worker-{rid}-2"]
    labels = {"mxnet.mlkube.io": "", "job_type": "WORKER", "runtime_id": rid, "task_index": "2"}
    assert worker.metadata.labels == labels
    assert (worker.spec.completions, worker.spec.parallelism) == (1, 1)
    assert worker.spec.template.metadata.labels.items() >= labels.items()
    assert env(worker.spec.template.spec.containers[0]) == {
        "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_PS_ROOT_URI": f"example-dist-job-scheduler-{rid}-0",
        "DMLC_NUM_SERVER": "2",
        "DMLC_NUM_WORKER": "3",
        "DMLC_ROLE": "worker",
    }
    (service,) = kube.core.list_namespaced_service("default").items  # only the scheduler has one
    assert service.metadata.name == f"example-dist-job-scheduler-{rid}-0"
    assert [(p.name, p.port) for p in service.spec.ports] == [("ps-root-port", 9091)]
    assert service.spec.selector == {**labels, "job_type": "SCHEDULER", "task_index": "0"}
    pods = kube.core.list_namespaced_pod("default", label_selector="mxnet.mlkube.io,job_type=SERVER").items
    assert len(pods) == 2


def test_mlkube_dist_fails_when_the_scheduler_fails(kube: KubeClient) -> None:
    create(
        kube,
        manifest(
            MLKUBE_DIST, {"SCHEDULER": {"duration": 0.05, "exit_code": 1}, "default": {"duration": None}}
        ),
    )
    final = until_phase(kube, MLKUBE_API, "example-dist-job", "Done")[-1]
    assert final["status"]["state"] == "Failed"
    statuses = {s["Mx_replica_type"]: s["state"] for s in final["status"]["replicaStatuses"]}
    assert statuses == {"SCHEDULER": "Failed", "SERVER": "Running", "WORKER": "Running"}


def test_mlkube_local_example_runs_one_worker_without_env(kube: KubeClient) -> None:
    create(kube, manifest(MLKUBE_LOCAL))
    final = until_phase(kube, MLKUBE_API, "example-local-job", "Done")[-1]
    assert final["status"]["state"] == "Succeeded"
    rid = final["spec"]["RuntimeId"]
    (job,) = client.BatchV1Api(kube.api).list_namespaced_job("default").items
    assert job.metadata.name == f"example-local-job-worker-{rid}-0"
    assert job.spec.template.spec.containers[0].env is None
    assert kube.core.list_namespaced_service("default").items == []


def test_mlkube_unknown_job_mode_is_a_setup_error(kube: KubeClient) -> None:
    body = manifest(MLKUBE_LOCAL)
    body["spec"]["jobMode"] = "cluster"
    create(kube, body)
    final = until_phase(kube, MLKUBE_API, "example-local-job", "Failed")[-1]
    assert final["status"]["reason"] == "unkonw job mode cluster"
    assert "state" not in final["status"]


def test_kubeflow_v1alpha1_example_succeeds_with_worker_0_and_cleans_up(kube: KubeClient) -> None:
    created = create(kube, manifest(KUBEFLOW_DIST))
    seen = until_phase(kube, KUBEFLOW_API, "gpu-dist-job", "Done", "Failed", since=created)
    assert phases(seen) == ["Creating", "Running", "CleanUp", "Done"]
    final = seen[-1]["status"]
    assert (final["state"], final["reason"]) == ("Succeeded", "")
    statuses = {s["mx_replica_type"]: s for s in final["replicaStatuses"]}
    # Worker 0 (the default chief) decided; worker 1 may still have been running then.
    assert statuses["WORKER"]["ReplicasStates"].get("Succeeded", 0) >= 1
    rid = seen[-1]["spec"]["RuntimeId"]
    services = {s.metadata.name: s for s in kube.core.list_namespaced_service("default").items}
    expected = {f"gpu-dist-job-scheduler-{rid}-0"}
    expected |= {f"gpu-dist-job-{t}-{rid}-{i}" for t in ("server", "worker") for i in range(2)}
    assert set(services) == expected
    scheduler = services[f"gpu-dist-job-scheduler-{rid}-0"]
    assert scheduler.spec.cluster_ip == "None"
    assert [(p.name, p.port) for p in scheduler.spec.ports] == [("ps-root-port", 9000)]
    assert scheduler.spec.selector == {
        "kubeflow.org": "",
        "job_type": "SCHEDULER",
        "runtime_id": rid,
        "mx_job_name": "gpu-dist-job",
        "task_index": "0",
    }
    kube.wait_until(lambda: not kube.core.list_namespaced_pod("default").items, "cleanupPodPolicy All")


def test_kubeflow_v1alpha1_pods_names_labels_and_env(kube: KubeClient) -> None:
    create(kube, manifest(KUBEFLOW_DIST, {"default": {"duration": None}}))
    kube.wait_until(lambda: len(kube.core.list_namespaced_pod("default").items) == 5, "five pods")
    rid = kube.custom.get_namespaced_custom_object(
        "kubeflow.org", "v1alpha1", "default", "mxjobs", "gpu-dist-job"
    )["spec"]["RuntimeId"]
    (pod,) = kube.core.list_namespaced_pod(
        "default", label_selector="mx_job_name=gpu-dist-job,job_type=SERVER,task_index=1"
    ).items
    prefix = f"gpu-dist-job-server-{rid}-1-"
    assert pod.metadata.name.startswith(prefix) and len(pod.metadata.name) == len(prefix) + 5
    assert pod.metadata.owner_references[0].kind == "MXJob"
    assert env(pod.spec.containers[0]) == {
        "DMLC_PS_ROOT_PORT": "9000",
        "DMLC_PS_ROOT_URI": f"gpu-dist-job-scheduler-{rid}-0",
        "DMLC_NUM_SERVER": "2",
        "DMLC_NUM_WORKER": "2",
        "DMLC_ROLE": "server",
        "DMLC_USE_KUBERNETES": "1",
    }
    final = until_phase(kube, KUBEFLOW_API, "gpu-dist-job", "Running")[-1]
    assert final["status"]["state"] == "Running"


def test_kubeflow_v1alpha1_chief_failure_is_done_and_failed(kube: KubeClient) -> None:
    script = {"default": {"duration": None}, "WORKER-0": {"duration": 0.05, "exit_code": 1}}
    create(kube, manifest(KUBEFLOW_DIST, script))
    seen = until_phase(kube, KUBEFLOW_API, "gpu-dist-job", "Done", "Failed")
    assert phases(seen)[-2:] == ["CleanUp", "Done"]
    assert seen[-1]["status"]["state"] == "Failed"
    statuses = {s["mx_replica_type"]: s for s in seen[-1]["status"]["replicaStatuses"]}
    assert statuses["WORKER"]["ReplicasStates"] == {"Failed": 1, "Running": 1}


def test_kubeflow_v1alpha1_setup_error_is_phase_failed(kube: KubeClient) -> None:
    body = manifest(KUBEFLOW_DIST)
    body["spec"]["terminationPolicy"] = {"chief": {"replicaName": "PS", "replicaIndex": 0}}
    create(kube, body)
    final = until_phase(kube, KUBEFLOW_API, "gpu-dist-job", "Failed")[-1]["status"]
    assert (final["state"], final["reason"]) == ("Failed", "Missing ReplicaSpec for chief: PS")
    assert kube.core.list_namespaced_pod("default").items == []

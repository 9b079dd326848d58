"""The EDL controller (legacy-paddle-edl.md) on the upstream example, through the real `kubernetes` client:
the children it creates, the trainer Job running to completion, the status it never writes, the autoscaler,
and the CRD lineage's updater."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localkube.controllers.builtin import BatchJobController, ReplicaSetController
from localkube.controllers.paddle_edl import PaddleEdlController
from test_controller_builtin import job_condition, running, wait_job, watch_custom
from test_controller_support import SCRIPT, KubeClient

# PaddlePaddle/edl v0.1.0 example/fit_a_line/examplejob.yaml, unchanged (its `passes` under `trainer:` is
# dropped by the API).
EXAMPLE = """
apiVersion: paddlepaddle.org/v1
kind: TrainingJob
metadata:
  name: example
spec:
  image: "paddlepaddle/edl-example"
  port: 7164
  ports_num: 1
  ports_num_for_sparse: 1
  fault_tolerant: true
  trainer:
    entrypoint: "python /workspace/train_ft.py"
    workspace: "/workspace"
    passes: 50
    min-instance: 2
    max-instance: 10
    resources:
      limits:
        #alpha.kubernetes.io/nvidia-gpu: 1
        cpu: "200m"
        memory: "200Mi"
      requests:
        cpu: "200m"
        memory: "200Mi"
  pserver:
    min-instance: 2
    max-instance: 2
    resources:
      limits:
        cpu: "800m"
        memory: "1Gi"
      requests:
        cpu: "500m"
        memory: "600Mi"
  master:
    resources:
        limits:
          cpu: "1"
          memory: "1Gi"
        requests:
          cpu: "500m"
          memory: "600Mi"
"""
# Master and pservers serve until deleted; trainers train briefly.
SERVE = {"trainer": {"duration": 0.3}, "pserver": {"duration": None}, "master": {"duration": None}}
API_VERSION, PLURAL = "paddlepaddle.org/v1", "trainingjobs"


def example(script: dict = SERVE, annotations: dict | None = None, **trainer: int) -> dict:
    manifest = yaml.safe_load(EXAMPLE)
    manifest["metadata"]["annotations"] = {SCRIPT: json.dumps(script), **(annotations or {})}
    manifest["spec"]["trainer"].update(trainer)
    return manifest


def create(kube: KubeClient, manifest: dict) -> dict:
    return kube.custom.create_namespaced_custom_object("paddlepaddle.org", "v1", "default", PLURAL, manifest)


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, BatchJobController(), ReplicaSetController(), PaddleEdlController()) as kube:
        yield kube


def env(container: client.V1Container) -> dict[str, str]:
    return {
        e.name: e.value if e.value is not None else e.value_from.field_ref.field_path for e in container.env
    }


POD_ENV = {
    "PADDLE_JOB_NAME": "example",
    "TRAINERS": "2",
    "PSERVERS": "2",
    "ENTRY": "python /workspace/train_ft.py",
    "TOPOLOGY": "python /workspace/train_ft.py",
    "TRAINER_PACKAGE": "/workspace",
    "PADDLE_INIT_PORT": "7164",
    "PADDLE_INIT_TRAINER_COUNT": "1",  # 200m rounded up
    "PADDLE_INIT_PORTS_NUM": "1",
    "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": "1",
    "PADDLE_INIT_NUM_GRADIENT_SERVERS": "2",
    "PADDLE_INIT_NUM_PASSES": "0",  # `passes` sits under trainer: in the example, where the API drops it
    "PADDLE_INIT_USE_GPU": "0",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "NAMESPACE": "metadata.namespace",
    "POD_IP": "status.podIP",
}
JOB_PORTS = [("jobport-7164", 7164), ("jobport-7165", 7165)]


def ports(container: client.V1Container) -> list[tuple[str, int]]:
    return [(p.name, p.container_port) for p in container.ports]


def test_example_creates_the_documented_children_and_never_writes_status(kube: KubeClient) -> None:
    create(kube, example())
    trainer = wait_job(kube, "example-trainer", lambda j: job_condition(j) is not None)
    assert job_condition(trainer) == ("Complete", "CompletionsReached")
    assert trainer.status.succeeded == 2
    # The controller sets no labels; kube-apiserver copies the template's, with the selector's it generated.
    assert trainer.metadata.labels == trainer.spec.template.metadata.labels
    assert trainer.metadata.labels["paddle-job"] == "example" and "job-name" in trainer.metadata.labels
    assert trainer.metadata.owner_references is None
    assert (trainer.spec.parallelism, trainer.spec.completions) == (2, None)
    template = trainer.spec.template
    assert template.metadata.labels["paddle-job"] == "example"
    assert template.spec.restart_policy == "Never"
    (container,) = template.spec.containers
    assert (container.name, container.image, container.image_pull_policy) == (
        "trainer",
        "paddlepaddle/edl-example",
        "Always",
    )
    assert container.command == ["paddle_k8s", "start_new_trainer"]  # fault_tolerant, since 57c933d
    assert ports(container) == JOB_PORTS
    assert env(container) == POD_ENV
    assert list(env(container)) == list(POD_ENV)
    assert container.resources.requests == {"cpu": "200m", "memory": "200Mi"}

    apps = client.AppsV1Api(kube.api)
    pserver = apps.read_namespaced_replica_set("example-pserver", "default")
    assert pserver.metadata.labels is None and pserver.metadata.owner_references is None
    assert pserver.spec.replicas == 2
    assert pserver.spec.template.metadata.labels == {"paddle-job-pserver": "example"}
    (container,) = pserver.spec.template.spec.containers
    assert container.command == ["paddle_k8s", "start_new_pserver"]
    assert container.volume_mounts is None
    assert ports(container) == JOB_PORTS and env(container) == POD_ENV
    assert container.resources.limits == {"cpu": "800m", "memory": "1Gi"}

    master = apps.read_namespaced_replica_set("example-master", "default")
    assert master.metadata.labels is None and master.spec.replicas == 1
    assert master.spec.template.metadata.labels == {"paddle-job-master": "example"}
    main, etcd = master.spec.template.spec.containers
    assert (main.name, main.command, main.env) == ("master", ["paddle_k8s", "start_master"], None)
    assert ports(main) == [("master-port", 8080), ("etcd-port", 2379)]
    assert main.resources.requests == {"cpu": "500m", "memory": "600Mi"}
    assert (etcd.name, etcd.image, etcd.image_pull_policy) == ("etcd", "quay.io/coreos/etcd:v3.2.1", "Always")
    assert etcd.command[:3] == ["etcd", "-name", "etcd0"] and env(etcd) == POD_ENV

    core = kube.core
    assert len(core.list_namespaced_pod("default", label_selector="paddle-job=example").items) == 2
    kube.wait_until(
        lambda: apps.read_namespaced_replica_set("example-pserver", "default").status.ready_replicas == 2,
        "two pservers",
    )
    masters = core.list_namespaced_pod("default", label_selector="paddle-job-master=example").items
    assert len(masters) == 1
    # The job's script reached the servers' pods (folded per replica type): they serve, never restarting.
    servers = core.list_namespaced_pod("default", label_selector="paddle-job-pserver=example").items + masters
    assert {s.restart_count for p in servers for s in p.status.container_statuses} == {0}
    job = kube.custom.get_namespaced_custom_object("paddlepaddle.org", "v1", "default", PLURAL, "example")
    assert "status" not in job or job["status"] in ({}, None)

    # The controller never deletes children, and they have no owner to be garbage-collected with.
    kube.custom.delete_namespaced_custom_object("paddlepaddle.org", "v1", "default", PLURAL, "example")
    assert client.BatchV1Api(kube.api).read_namespaced_job("example-trainer", "default").metadata.name
    assert {rs.metadata.name for rs in apps.list_namespaced_replica_set("default").items} == {
        "example-master",
        "example-pserver",
    }


def test_non_fault_tolerant_job_uses_the_v2_commands(kube: KubeClient) -> None:
    manifest = example()
    manifest["spec"]["fault_tolerant"] = False
    manifest["spec"]["HostNetwork"] = True
    create(kube, manifest)
    trainer = wait_job(kube, "example-trainer", lambda j: True)
    assert trainer.spec.template.spec.containers[0].command == ["paddle_k8s", "start_trainer", "v2"]
    assert trainer.spec.template.spec.host_network is True
    apps = client.AppsV1Api(kube.api)
    kube.wait_until(lambda: len(apps.list_namespaced_replica_set("default").items) == 2, "both ReplicaSets")
    pserver = apps.read_namespaced_replica_set("example-pserver", "default")
    assert pserver.spec.template.spec.containers[0].command == ["paddle_k8s", "start_pserver"]


def test_autoscaler_raises_trainer_parallelism_up_to_max(tmp_path: Path) -> None:
    controllers = (BatchJobController(), ReplicaSetController(), PaddleEdlController(autoscale_interval=0.05))
    with running(tmp_path, *controllers) as kube:
        script = {**SERVE, "trainer": {"duration": 1.5}}
        create(kube, example(script, **{"min-instance": 1, "max-instance": 3}))
        seen: list[int] = []

        def scaled(job: client.V1Job) -> bool:
            seen.append(job.spec.parallelism)
            return job.spec.parallelism == 3 and job.status.active == 3

        wait_job(kube, "example-trainer", scaled)
        assert seen[0] in (1, 2) and sorted(seen) == seen  # one step at a time, never down
        done = wait_job(kube, "example-trainer", lambda j: job_condition(j) is not None)
        assert job_condition(done) == ("Complete", "CompletionsReached")
        assert (done.spec.parallelism, done.status.succeeded) == (3, 3)


def test_crd_lineage_updater_writes_phase_and_releases_servers(kube: KubeClient) -> None:
    # Not elastic: the updater's status writes are job updates, on which the autoscaler also runs.
    create(kube, example(annotations={"localkube.dev/edl-lineage": "crd"}, **{"max-instance": 2}))
    seen = watch_custom(
        kube, API_VERSION, PLURAL, "example", lambda j: j.get("status", {}).get("phase") == "succeeded"
    )
    assert "running" in [s.get("status", {}).get("phase") for s in seen]
    status = seen[-1]["status"]
    assert status["reason"] == "Success!"
    types = [r["training_resource_type"] for r in status["replica_statuses"]]
    assert types == ["MASTER", "PSERVER", "TRAINER"]
    assert status["replica_statuses"][2]["resource_states"] == {"succeeded": 2}
    apps = client.AppsV1Api(kube.api)
    kube.wait_until(lambda: not apps.list_namespaced_replica_set("default").items, "released servers")


def test_crd_lineage_non_fault_tolerant_failure(kube: KubeClient) -> None:
    manifest = example(
        {**SERVE, "trainer": {"duration": 0.1, "exit_code": 1}}, {"localkube.dev/edl-lineage": "crd"}
    )
    manifest["spec"]["fault_tolerant"] = False
    create(kube, manifest)
    seen = watch_custom(
        kube, API_VERSION, PLURAL, "example", lambda j: j.get("status", {}).get("phase") == "failed"
    )
    assert seen[-1]["status"]["reason"] == "at least one trainer failed!"
    types = [r["training_resource_type"] for r in seen[-1]["status"]["replica_statuses"]]
    assert types == ["PSERVER", "TRAINER"]  # the CRD lineage creates a master only when fault-tolerant

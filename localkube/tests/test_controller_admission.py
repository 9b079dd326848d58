"""localkube's controllers meet the API's admission as a real operator does: a pod the API refuses (no
containers) is a Warning event on the job, never a stored pod; the T9k MPIJob of the docs, whose launcher is
declared as `template: {}`, gets the controller's default launcher container and runs end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.controllers import default_controllers
from localkube.controllers.tensorstack_siblings import SiblingController
from test_controller_builtin import running
from test_controller_support import KubeClient
from test_controller_support import job as kubeflow_job
from test_controller_tensorstack import conditions, create, pods, until_phase
from test_controller_tensorstack_siblings import command, job, template

REFUSED = 'Error creating: Pod "{pod}" is invalid: spec.containers: Required value'


@pytest.fixture
def t9k(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, SiblingController()) as kube:
        yield kube


def docs_mpijob(name: str, script: dict) -> dict:
    """The shape of UC's MPIJob example (2025 API): workers with a `worker` container, `launcher` with
    `template: {}`, `mpiConfig` with the script."""
    spec = {
        "mpiConfig": {"home": "/usr/local", "mca": {"btl": "^openib"}, "script": ["./random_walk", "20"]},
        "ssh": {"sshdPath": "/usr/sbin/sshd"},
        "runPolicy": {"cleanUpWorkers": True},
        "replicaSpecs": [
            {"type": "worker", "replicas": 2, "template": template("worker")},
            {"type": "launcher", "replicas": 1, "template": {}},
        ],
    }
    spec["replicaSpecs"][0]["template"]["spec"]["containers"][0]["workingDir"] = "/usr/local/code"
    return job("MPIJob", name, script, spec)


def test_an_mpijob_launcher_declared_as_an_empty_template_runs_in_the_default_container(t9k: KubeClient):
    body = docs_mpijob("mpi-docs", {"launcher": {"duration": 0.1}, "default": {"duration": None}})
    create(t9k, body)

    final = until_phase(t9k, body, "Succeeded", "Failed")

    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final)["Completed"] == ("True", "Succeeded")
    launcher = pods(t9k, "mpi-docs")["mpi-docs-launcher"]  # the typed client reads every stored pod
    (container,) = launcher.spec.containers
    assert (container.name, container.image, container.working_dir) == (
        "launcher",
        "t9kpublic/example:1",
        "/usr/local/code",
    )
    assert command(launcher) == [
        "/usr/local/bin/mpirun",
        "--host",
        "mpi-docs-worker-0.default.svc,mpi-docs-worker-1.default.svc",
        "--mca",
        "btl",
        "^openib",
        "./random_walk",
        "20",
    ]
    assert launcher.status.container_statuses[0].state.terminated.exit_code == 0


def test_a_launcher_template_with_other_containers_gets_the_default_one_first(t9k: KubeClient):
    body = docs_mpijob("mpi-sidecar", {"launcher": {"duration": 0.1}, "default": {"duration": None}})
    body["spec"]["replicaSpecs"][1]["template"] = template("log-shipper")
    create(t9k, body)

    until_phase(t9k, body, "Succeeded", "Failed")

    launcher = pods(t9k, "mpi-sidecar")["mpi-sidecar-launcher"]
    assert [c.name for c in launcher.spec.containers] == ["launcher", "log-shipper"]
    assert launcher.spec.containers[0].command[0] == "/usr/local/bin/mpirun"
    assert launcher.spec.containers[1].command is None  # the sidecar is left as written


def test_a_t9k_replica_without_containers_is_refused_with_an_event_and_no_pod(t9k: KubeClient):
    spec = {"replicaSpecs": [{"type": "worker", "replicas": 1, "template": {}}]}
    body = job("MPIJob", "mpi-empty", {"default": {"duration": None}}, spec)
    create(t9k, body)

    t9k.wait_until(lambda: "FailedCreate" in t9k.reasons("mpi-empty"), "the refusal's event")

    (event,) = [e for e in t9k.events("mpi-empty") if e.reason == "FailedCreate"]
    assert event.type == "Warning" and event.involved_object.kind == "MPIJob"
    assert event.message == REFUSED.format(pod="mpi-empty-launcher")
    assert t9k.core.list_namespaced_pod("default").items == []  # nothing stored; listing still works


def test_a_kubeflow_replica_without_containers_is_refused_with_the_operators_event(tmp_path: Path):
    with running(tmp_path, *default_controllers()) as kube:
        master = {"replicas": 1, "template": {"spec": {"containers": []}}}
        body = kubeflow_job("PyTorchJob", "torch-empty", {"Master": master})
        kube.create(body)

        kube.wait_until(lambda: "FailedCreatePod" in kube.reasons("torch-empty"), "the refusal's event")

        (event,) = [e for e in kube.events("torch-empty") if e.reason == "FailedCreatePod"]
        assert event.type == "Warning" and event.source.component == "pytorchjob-controller"
        assert event.message == REFUSED.format(pod="torch-empty-master-0")
        assert kube.core.list_namespaced_pod("default").items == []

"""The MPI Operator's `kubeflow.org/v2beta1` MPIJob emulation, through the real `kubernetes` client: its CRD
loaded from tests/fixtures/crds, the launcher run by the batch Job controller, the scripted runtime."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from localkube.controllers.builtin import BatchJobController
from localkube.controllers.mpi_operator import MpiOperatorController
from localkube.gates import open_gate
from test_controller_builtin import running, watch_custom
from test_controller_support import SCRIPT, KubeClient

CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds" / "kubeflow.org-v2beta1"
API_VERSION = "kubeflow.org/v2beta1"
ROLE = "training.kubeflow.org/job-role"
FOREVER = {"duration": None}  # runs until deleted


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, MpiOperatorController(), BatchJobController(), crd_dir=CRDS) as kube:
        yield kube


def mpijob(name: str, script: dict, workers: int = 2, **spec: Any) -> dict:
    def template(container: str) -> dict:
        return {"spec": {"containers": [{"name": container, "image": "mpioperator/mpi-pi:openmpi"}]}}

    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": name, "annotations": {SCRIPT: json.dumps(script)}},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template("mpi-launcher")},
                "Worker": {"replicas": workers, "template": template("mpi-worker")},
            },
            **spec,
        },
    }


def create(kube: KubeClient, manifest: dict) -> dict:
    return kube.custom.create_namespaced_custom_object(
        "kubeflow.org", "v2beta1", "default", "mpijobs", manifest
    )


def suspend(kube: KubeClient, name: str, value: bool) -> None:
    body = {"spec": {"runPolicy": {"suspend": value}}}
    kube.custom.patch_namespaced_custom_object("kubeflow.org", "v2beta1", "default", "mpijobs", name, body)


def until(kube: KubeClient, name: str, check: Any) -> dict:
    return watch_custom(kube, API_VERSION, "mpijobs", name, check)[-1]


def true_types(job: dict) -> list[str]:
    return [c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"]


def pods(kube: KubeClient, name: str, role: str) -> list[client.V1Pod]:
    selector = f"training.kubeflow.org/job-name={name},{ROLE}={role}"
    return kube.core.list_namespaced_pod("default", label_selector=selector).items


def test_success_runs_workers_and_a_launcher_job_labelled_as_the_mpi_operator_does(kube: KubeClient) -> None:
    gate = f"mpi-launcher-{uuid.uuid4().hex[:8]}"
    create(kube, mpijob("pi", {"default": FOREVER, "launcher": {"duration": 0, "gate": gate}}))

    running = until(kube, "pi", lambda j: "Running" in true_types(j))
    open_gate(gate)  # the launcher ends once the job was seen running
    done = until(kube, "pi", lambda j: "Succeeded" in true_types(j))

    assert [c["reason"] for c in running["status"]["conditions"]] == ["MPIJobCreated", "MPIJobRunning"]
    succeeded = done["status"]["conditions"][-1]
    assert (succeeded["reason"], succeeded["message"]) == (
        "MPIJobSucceeded",
        "MPIJob default/pi successfully completed.",
    )
    assert done["status"]["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    workers = sorted(pods(kube, "pi", "worker"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in workers] == ["pi-worker-0", "pi-worker-1"]
    assert [p.metadata.labels["training.kubeflow.org/replica-index"] for p in workers] == ["0", "1"]
    assert all("training.kubeflow.org/replica-type" not in p.metadata.labels for p in workers)
    assert workers[0].spec.hostname == "pi-worker-0" and workers[0].spec.subdomain == "pi"
    (launcher,) = pods(kube, "pi", "launcher")
    assert launcher.metadata.name.startswith("pi-launcher-")
    assert launcher.metadata.owner_references[0].kind == "Job"
    assert "training.kubeflow.org/replica-index" not in launcher.metadata.labels
    env = {e.name: e.value for e in launcher.spec.containers[0].env}
    assert env["K_MPI_JOB_ROLE"] == "launcher"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    hostfile = kube.core.read_namespaced_config_map("pi-config", "default").data["hostfile"]
    assert hostfile == "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n"
    assert kube.core.read_namespaced_service("pi", "default").spec.cluster_ip == "None"


def test_a_failing_launcher_fails_the_job_with_the_launcher_jobs_reason(kube: KubeClient) -> None:
    script = {"default": FOREVER, "launcher": {"duration": 0, "exit_code": 3}}
    job = mpijob("pi-fail", script, runPolicy={"backoffLimit": 0, "cleanPodPolicy": "Running"})
    # OnFailure (the launcher's default): its pod restarts once, which the backoff limit of 0 does not allow;
    # the Job fails and deletes it, counting it as failed.
    create(kube, job)

    done = until(kube, "pi-fail", lambda j: "Failed" in true_types(j))

    failed = done["status"]["conditions"][-1]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("MPIJob default/pi-fail has failed: ")
    assert done["status"]["replicaStatuses"]["Launcher"] == {"failed": 1}
    kube.wait_until(lambda: pods(kube, "pi-fail", "worker") == [], "the running workers deleted")


def test_the_replica_specs_restart_policy_replaces_the_templates_with_a_warning(kube: KubeClient) -> None:
    job = mpijob("pi-policy", {"default": FOREVER}, workers=1)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["restartPolicy"] = "Never"
    job["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    create(kube, job)

    until(kube, "pi-policy", lambda j: "Running" in true_types(j))

    launcher_job = client.BatchV1Api(kube.api).read_namespaced_job("pi-policy-launcher", "default")
    assert launcher_job.spec.template.spec.restart_policy == "OnFailure"  # the launcher's default
    (worker,) = pods(kube, "pi-policy", "worker")
    assert worker.spec.restart_policy == "Never"  # ExitCode: the operator decides, the pod never restarts
    events = kube.core.list_namespaced_event("default", field_selector="involvedObject.name=pi-policy").items
    assert [(e.type, e.reason) for e in events if e.reason == "SetPodTemplateRestartPolicy"] == [
        ("Warning", "SetPodTemplateRestartPolicy")
    ]


def test_suspend_deletes_the_workers_and_the_launcher_pod_and_resume_runs_them_again(
    kube: KubeClient,
) -> None:
    create(kube, mpijob("pi-pause", {"default": FOREVER}, workers=1))
    until(kube, "pi-pause", lambda j: "Running" in true_types(j))

    suspend(kube, "pi-pause", True)
    suspended = until(kube, "pi-pause", lambda j: "Suspended" in true_types(j))
    kube.wait_until(
        lambda: pods(kube, "pi-pause", "worker") == [] and pods(kube, "pi-pause", "launcher") == [],
        "the workers and the launcher pod deleted",
    )
    suspend(kube, "pi-pause", False)
    resumed = until(kube, "pi-pause", lambda j: "Running" in true_types(j))

    assert suspended["status"]["conditions"][-1]["reason"] == "MPIJobSuspended"
    reasons = {c["type"]: c["reason"] for c in resumed["status"]["conditions"]}
    assert reasons["Suspended"] == "MPIJobResumed" and reasons["Running"] == "MPIJobRunning"
    assert len(pods(kube, "pi-pause", "worker")) == 1


def test_wait_for_workers_ready_creates_the_launcher_once_every_worker_runs(kube: KubeClient) -> None:
    batch = client.BatchV1Api(kube.api)
    create(kube, mpijob("pi-wait", {"default": FOREVER}, launcherCreationPolicy="WaitForWorkersReady"))

    kube.wait_until(lambda: bool(batch.list_namespaced_job("default").items), "the launcher Job")

    workers = pods(kube, "pi-wait", "worker")
    assert len(workers) == 2 and all(p.status.phase == "Running" for p in workers)

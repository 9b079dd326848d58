"""localkube's Kubeflow Trainer v2 controller (TrainJob to JobSet), through the real `kubernetes` client: the
Trainer CRDs of kubeflow/trainer v2.3.0 and JobSet's from tests/fixtures/crds, the JobSet and batch Job
controllers, the scripted runtime (a TrainJob's script selects pods by replicated job and index: `node`,
`node-1`, `launcher`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from localkube.controllers.builtin import BatchJobController
from localkube.controllers.jobset import JobSetController
from localkube.controllers.trainer import TrainJobController
from localkube.gates import open_gate
from test_controller_builtin import running, watch_custom
from test_controller_support import SCRIPT, KubeClient

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"
CRDS = [FIXTURES / "trainer.kubeflow.org-v1alpha1", FIXTURES / "jobset.x-k8s.io-v1alpha2"]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
JS = "jobset.sigs.k8s.io/"
INDEX = "batch.kubernetes.io/job-completion-index"
FOREVER = {"duration": None}
QUICK = {"duration": 0.05, "backoff": 0.01}


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    controllers = (TrainJobController(), JobSetController(), BatchJobController())
    with running(tmp_path, *controllers, crd_dir=CRDS) as kube:  # type: ignore[arg-type]
        yield kube


def torch_runtime(name: str = "torch-distributed", nodes: int = 1) -> dict:
    """Upstream's manifests/base/runtimes/torch_distributed.yaml (v2.3.0), as a dict."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": nodes, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {"name": "node", "image": "pytorch/pytorch:2.13.0"}
                                            ]
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def mpi_runtime(name: str = "mpi") -> dict:
    """An MPI runtime shaped as upstream's deepspeed_distributed.yaml (launcher as node, launcher decides)."""

    def rjob(rjob_name: str, **extra: Any) -> dict:
        pod = {"spec": {"containers": [{"name": "node", "image": "mpi-runtime"}]}}
        return {"name": rjob_name, "template": {"spec": {"template": pod}}, **extra}

    launcher = rjob("launcher", dependsOn=[{"name": "node", "status": "Ready"}])
    launcher["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "mpi": {"numProcPerNode": 2, "mpiImplementation": "OpenMPI", "runLauncherAsNode": True},
            },
            "template": {
                "spec": {
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [rjob("node"), launcher],
                }
            },
        },
    }


def trainjob(name: str, script: dict, runtime: str = "torch-distributed", **spec: Any) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {SCRIPT: json.dumps(script)}},
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }


def create_runtime(kube: KubeClient, runtime: dict) -> None:
    kube.custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", runtime)


def create(kube: KubeClient, manifest: dict) -> dict:
    return kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", manifest)


def until(kube: KubeClient, name: str, check: Any) -> dict:
    return watch_custom(kube, f"{GROUP}/{VERSION}", "trainjobs", name, check)[-1]


def condition(job: dict, type_: str) -> tuple[str, str, str] | None:
    found = [c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else None


def finished(job: dict) -> bool:
    return any((condition(job, t) or ("",))[0] == "True" for t in ("Complete", "Failed"))


def jobset(kube: KubeClient, name: str) -> dict:
    return kube.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name)


def pods(kube: KubeClient, name: str) -> list[client.V1Pod]:
    found = kube.core.list_namespaced_pod("default", label_selector=f"{JS}jobset-name={name}").items
    return sorted(
        found, key=lambda p: (p.metadata.labels[f"{JS}replicatedjob-name"], p.metadata.labels[INDEX])
    )


def env_of(pod: client.V1Pod) -> dict[str, Any]:
    return {
        e.name: e.value if e.value is not None else e.value_from.field_ref.field_path
        for e in pod.spec.containers[0].env or []
    }


def test_a_torch_trainjob_runs_its_nodes_as_a_jobset_and_completes(kube: KubeClient) -> None:
    create_runtime(kube, torch_runtime())
    trainer = {
        "numNodes": 2,
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
        "env": [{"name": "EPOCHS", "value": "3"}],
        "resourcesPerNode": {"limits": {"cpu": "3"}},
    }
    created = create(kube, trainjob("mnist", {"default": QUICK}, trainer=trainer))
    done = until(kube, "mnist", finished)

    assert condition(done, "Complete") == ("True", "AllJobsCompleted", "jobset completed successfully")
    assert done["status"]["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    js = jobset(kube, "mnist")
    owner = js["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "TrainJob",
        "mnist",
        created["metadata"]["uid"],
        True,
    )
    node_job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (node_job["parallelism"], node_job["completions"]) == (2, 2)
    node_pods = pods(kube, "mnist")
    assert [p.metadata.name.rsplit("-", 1)[0] for p in node_pods] == ["mnist-node-0-0", "mnist-node-0-1"]
    for rank, pod in enumerate(node_pods):
        container = pod.spec.containers[0]
        assert (container.image, container.command) == ("example/train:1", ["torchrun", "train.py"])
        assert container.resources.limits == {"cpu": "3"}
        assert [p.container_port for p in container.ports] == [29500]
        env = env_of(pod)
        assert {k: v for k, v in env.items() if k != "JOB_COMPLETION_INDEX"} == {
            "EPOCHS": "3",
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "3",
            "PET_NODE_RANK": f"metadata.annotations['{INDEX}']",
            "PET_MASTER_ADDR": "mnist-node-0-0.mnist",
            "PET_MASTER_PORT": "29500",
        }
        assert pod.metadata.annotations[INDEX] == str(rank)
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"mnist-node-0-{rank}", "mnist")


def test_a_failing_node_fails_the_trainjob_with_the_jobsets_reason(kube: KubeClient) -> None:
    create_runtime(kube, torch_runtime(nodes=2))
    script = {"default": FOREVER, "node-1": {**QUICK, "exit_code": 3, "logs": ["rank 1: CUDA error"]}}
    create(kube, trainjob("crash", script))
    failed = until(kube, "crash", finished)

    assert condition(failed, "Failed") == (
        "True",
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: crash-node-0)",
    )
    assert failed["status"]["jobsStatus"][0] | {"name": "node"} == {
        "name": "node",
        "ready": 0,
        "succeeded": 0,
        "failed": 1,
        "active": 0,
        "suspended": 0,
    }
    js = jobset(kube, "crash")
    assert [(c["type"], c["reason"]) for c in js["status"]["conditions"] if c["status"] == "True"] == [
        ("Failed", "FailedJobs")
    ]


def test_suspend_and_resume_go_through_the_jobset(kube: KubeClient) -> None:
    create_runtime(kube, torch_runtime(nodes=2))
    gate = f"trainer-{uuid.uuid4().hex[:8]}"
    create(kube, trainjob("pause", {"default": {"duration": 0, "gate": gate}}, suspend=True))
    suspended = until(kube, "pause", lambda j: condition(j, "Suspended") is not None)
    assert condition(suspended, "Suspended") == ("True", "Suspended", "TrainJob is suspended")
    kube.wait_until(lambda: jobset(kube, "pause")["spec"]["suspend"] is True, "the JobSet suspended")
    suspended = until(
        kube, "pause", lambda j: (j["status"].get("jobsStatus") or [{}])[0].get("suspended") == 1
    )
    assert pods(kube, "pause") == []

    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "pause", {"spec": {"suspend": False}}
    )
    running = until(kube, "pause", lambda j: (j["status"].get("jobsStatus") or [{}])[0].get("ready") == 1)
    assert condition(running, "Suspended") == ("False", "Resumed", "TrainJob is resumed")
    assert len(pods(kube, "pause")) == 2
    open_gate(gate)
    done = until(kube, "pause", finished)
    assert condition(done, "Complete")[0] == "True"  # type: ignore[index]


def test_a_missing_runtime_sets_no_condition_and_records_an_event(kube: KubeClient) -> None:
    create(kube, trainjob("orphan", {"default": QUICK}, runtime="not-there"))

    def event() -> list[client.CoreV1Event]:
        return [
            e
            for e in kube.core.list_namespaced_event("default").items
            if e.involved_object.name == "orphan" and e.reason == "TrainJobResourcesCreationFailed"
        ]

    kube.wait_until(lambda: bool(event()), "the Warning event")
    assert event()[0].type == "Warning"
    assert event()[0].message == (
        "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime specified in TrainJob: "
        'clustertrainingruntimes.trainer.kubeflow.org "not-there" not found'
    )
    job = kube.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "orphan")
    assert not (job.get("status") or {}).get("conditions")

    create_runtime(kube, torch_runtime("not-there"))  # the runtime appearing later lets the job run
    assert condition(until(kube, "orphan", finished), "Complete")[0] == "True"  # type: ignore[index]


def test_an_mpi_trainjob_runs_a_launcher_after_its_nodes_with_a_hostfile(kube: KubeClient) -> None:
    create_runtime(kube, mpi_runtime())
    script = {"default": FOREVER, "launcher": QUICK}
    create(kube, trainjob("mpi", script, runtime="mpi", trainer={"numNodes": 3}))
    done = until(kube, "mpi", finished)

    assert condition(done, "Complete") == ("True", "AllJobsCompleted", "jobset completed successfully")
    hostfile = kube.core.read_namespaced_config_map("mpi-mpi-hostfile", "default").data["hostfile"]
    assert hostfile == ("mpi-launcher-0-0.mpi slots=2\nmpi-node-0-0.mpi slots=2\nmpi-node-0-1.mpi slots=2\n")
    kube.core.read_namespaced_secret("mpi-mpi-ssh-auth", "default")
    js = jobset(kube, "mpi")
    assert [r["template"]["spec"]["parallelism"] for r in js["spec"]["replicatedJobs"]] == [2, 1]
    launcher = next(
        p for p in pods(kube, "mpi") if p.metadata.labels[f"{JS}replicatedjob-name"] == "launcher"
    )
    assert env_of(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env_of(launcher)["OMPI_MCA_orte_set_default_slots"] == "2"


def test_a_jax_trainjob_gets_the_coordinator_and_its_process_id(kube: KubeClient) -> None:
    runtime = torch_runtime("jax-distributed")
    runtime["spec"]["mlPolicy"] = {"numNodes": 1, "jax": {}}
    create_runtime(kube, runtime)
    create(kube, trainjob("jx", {"default": QUICK}, runtime="jax-distributed", trainer={"numNodes": 2}))
    done = until(kube, "jx", finished)

    assert condition(done, "Complete")[0] == "True"  # type: ignore[index]
    for pod in pods(kube, "jx"):
        assert {k: v for k, v in env_of(pod).items() if k.startswith("JAX_")} == {
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": f"metadata.annotations['{INDEX}']",
            "JAX_COORDINATOR_ADDRESS": "jx-node-0-0.jx:29500",
        }
        assert "PET_NNODES" not in env_of(pod)


def test_without_a_trainer_section_no_ml_policy_env_is_set(kube: KubeClient) -> None:
    create_runtime(kube, torch_runtime())
    create(kube, trainjob("bare", {"default": QUICK}))
    until(kube, "bare", finished)

    (pod,) = pods(kube, "bare")
    assert [
        k for k in env_of(pod) if k.startswith("PET_")
    ] == []  # as upstream: no trainer, no trainer container

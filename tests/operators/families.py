"""The training APIs other than Kubeflow v1 (issue 4) as the acceptance tests drive them: one
:class:`FamilyCase` per kind, with a manifest whose pods follow a scripted timeline, the replica that decides
the outcome, and helpers that read the localkube store directly (replica pods, leftover children).

localkube's default controllers emulate every kind here: EDL, both legacy MXNet operators, the MPI Operator's
v2beta1 MPIJob, every T9k kind (TensorFlow/PyTorch/XGBoost training jobs, GenericJob, DeepSpeedJob,
ColossalAIJob and MPIJob) and Kubeflow Trainer v2's TrainJob (on localkube's JobSet and Trainer controllers,
under upstream's torch-distributed ClusterTrainingRuntime).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.resources import BATCH_JOBS, PODS, REPLICASETS, SERVICES
from localkube.runtime import ANNOTATION

from airflow_provider_training import operators, sensors
from airflow_provider_training.kinds import JobKind, get_kind
from tests.fixtures import CRD_ONLY, torch_runtime
from tests.operators.harness import KINDS, NAMESPACE, KindCase, manifest, serve

T9K = "batch.tensorstack.dev/v1beta1"
TORCH_RUNTIME = torch_runtime()
IMAGE = "localkube/scripted:latest"
CHILD_TYPES = (PODS, SERVICES, BATCH_JOBS, REPLICASETS)


@dataclass(frozen=True)
class FamilyCase:
    """One kind: its thin operator and sensor, a manifest factory and the replica deciding the outcome."""

    id: str
    operator: type
    sensor: type
    build: Callable[[], dict[str, Any]]  # the manifest without the script annotation
    decider: str  # the script selector of the replica whose failure fails the job
    decider_text: str  # how the failure message names that replica (lower case)
    options: Mapping[str, Any] = field(default_factory=dict)  # e.g. kind= for the generic T9k operator

    def __str__(self) -> str:
        return self.id

    @cached_property
    def job_kind(self) -> JobKind:
        manifest = self.build()
        return get_kind(manifest["kind"], manifest["apiVersion"])

    @property
    def plural(self) -> str:
        return self.job_kind.resource.plural

    @property
    def t9k(self) -> bool:
        return self.job_kind.api_version == T9K

    @property
    def kubeflow(self) -> bool:
        return self.job_kind.api_version == "kubeflow.org/v1"

    def manifest(self, script: Mapping[str, Any], **metadata: Any) -> dict[str, Any]:
        job = self.build()
        job["metadata"] = {**metadata, "annotations": {ANNOTATION: json.dumps(script)}}
        return job

    def make_operator(self, script: Mapping[str, Any], **kwargs: Any) -> Any:
        kwargs.setdefault("check_interval", 0.2)
        kwargs.setdefault("log_replicas", "all")
        return self.operator(task_id="train", job=self.manifest(script), **self.options, **kwargs)

    def make_sensor(self, name: str, **kwargs: Any) -> Any:
        return self.sensor(
            task_id="wait", job_name=name, poke_interval=0.1, timeout=20, **self.options, **kwargs
        )


# -- manifests ---------------------------------------------------------------------------------------------


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": ["python", "train.py"]}


def _template(container: str) -> dict[str, Any]:
    return {"spec": {"containers": [_container(container)], "restartPolicy": "Never"}}


def edl() -> dict[str, Any]:
    resources = {"limits": {"cpu": "200m", "memory": "200Mi"}, "requests": {"cpu": "200m", "memory": "200Mi"}}
    return {
        "apiVersion": "paddlepaddle.org/v1",
        "kind": "TrainingJob",
        "spec": {
            "image": IMAGE,
            "port": 7164,
            "ports_num": 1,
            "ports_num_for_sparse": 1,
            "fault_tolerant": False,
            "passes": 1,
            "trainer": {
                "entrypoint": "python train.py",
                "workspace": "/workspace",
                "min-instance": 1,
                "max-instance": 1,
                "resources": resources,
            },
            "pserver": {"min-instance": 1, "max-instance": 1, "resources": resources},
            "master": {"resources": resources},
        },
    }


def mxnet(api_version: str, kind: str) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        replicas = [
            {"replicas": 1, "mxReplicaType": "SCHEDULER", "PsRootPort": 9091, "template": _template("mxnet")},
            {"replicas": 1, "mxReplicaType": "SERVER", "template": _template("mxnet")},
            {"replicas": 1, "mxReplicaType": "WORKER", "template": _template("mxnet")},
        ]
        return {
            "apiVersion": api_version,
            "kind": kind,
            "spec": {"jobMode": "dist", "replicaSpecs": replicas},
        }

    return build


def t9k_training(kind: str, replicas: Mapping[str, int]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        from airflow_provider_training.specs import build_job

        return build_job(kind, IMAGE, ["python", "train.py"], dict(replicas), restart_policy="Never")

    return build


def t9k_generic(kind: str, replicas: Mapping[str, int]) -> Callable[[], dict[str, Any]]:
    """The ``replicaSpecs`` shape of GenericJob and the 2025 MPIJob / ColossalAIJob (restartPolicy object)."""

    def build() -> dict[str, Any]:
        specs = [
            {
                "type": type_,
                "replicas": count,
                "restartPolicy": {"policy": "Never", "limit": 0},
                "template": _template(type_),
            }
            for type_, count in replicas.items()
        ]
        return {"apiVersion": T9K, "kind": kind, "spec": {"replicaSpecs": specs}}

    return build


def mpi_operator() -> dict[str, Any]:
    """The standalone MPI Operator's MPIJob (its CRD is loaded into the family cluster). The launcher fails
    once and for all (``Never``, no retry): under its default, ``OnFailure`` with the Job's backoff limit of
    6, a failing launcher restarts six times first (on a real cluster with its Job controller's backoff)."""
    replicas = {
        "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": _template("mpi-launcher")},
        "Worker": {"replicas": 1, "template": _template("mpi-worker")},
    }
    spec = {"runPolicy": {"backoffLimit": 0}, "mpiReplicaSpecs": replicas}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "spec": spec}


def trainjob() -> dict[str, Any]:
    """A two-node TrainJob on upstream's torch-distributed runtime (the family cluster creates it)."""
    trainer = {"numNodes": 2, "image": IMAGE, "command": ["torchrun", "train.py"]}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "spec": {"runtimeRef": {"name": TORCH_RUNTIME["metadata"]["name"]}, "trainer": trainer},
    }


def deepspeed() -> dict[str, Any]:
    worker = {"replicas": 2, "restartPolicy": "Never", "template": _template("worker")}
    return {"apiVersion": T9K, "kind": "DeepSpeedJob", "spec": {"worker": worker}}


CASES = [
    FamilyCase(
        "EDL-TrainingJob",
        operators.PaddleEDLTrainingJobOperator,
        sensors.PaddleEDLTrainingJobSensor,
        edl,
        "trainer",
        "trainer",
    ),
    FamilyCase(
        "MXJob-v1alpha1",
        operators.MXJobV1Alpha1Operator,
        sensors.MXJobV1Alpha1Sensor,
        mxnet("kubeflow.org/v1alpha1", "MXJob"),
        "worker",  # terminationPolicy.chief defaults to WORKER 0
        "worker-0",
    ),
    FamilyCase(
        "MxJob-mlkube",
        operators.MlkubeMxJobOperator,
        sensors.MlkubeMxJobSensor,
        mxnet("mxnet.mlkube.io/v1beta1", "MxJob"),
        "scheduler",  # dist mode: the scheduler decides
        "scheduler-0",
    ),
    FamilyCase(
        "T9k-TensorFlowTrainingJob",
        operators.T9kTensorFlowTrainingJobOperator,
        sensors.T9kTensorFlowTrainingJobSensor,
        t9k_training("TensorFlowTrainingJob", {"chief": 1, "worker": 1}),
        "chief",
        "chief-0",
    ),
    FamilyCase(
        "T9k-PyTorchTrainingJob",
        operators.T9kPyTorchTrainingJobOperator,
        sensors.T9kPyTorchTrainingJobSensor,
        t9k_training("PyTorchTrainingJob", {"master": 1, "worker": 1}),
        "master",
        "master-0",
    ),
    FamilyCase(
        "T9k-XGBoostTrainingJob",
        operators.T9kXGBoostTrainingJobOperator,
        sensors.T9kXGBoostTrainingJobSensor,
        t9k_training("XGBoostTrainingJob", {"master": 1, "worker": 1}),
        "master",
        "master-0",
    ),
    *(
        FamilyCase(
            f"T9k-{kind}",
            operators.T9kJobOperator,
            sensors.T9kJobSensor,
            build,
            decider,
            decider_text,
            {"kind": kind},
        )
        for kind, build, decider, decider_text in (
            ("DeepSpeedJob", deepspeed, "worker", "worker-0"),
            # The launcher pod has no index: <job>-launcher.
            (
                "ColossalAIJob",
                t9k_generic("ColossalAIJob", {"launcher": 1, "worker": 1}),
                "launcher",
                "launcher",
            ),
            ("MPIJob", t9k_generic("MPIJob", {"launcher": 1, "worker": 1}), "launcher", "launcher"),
            ("GenericJob", t9k_generic("GenericJob", {"worker": 2}), "worker", "worker-0"),
        )
    ),
]
T9K_CASES = [case for case in CASES if case.t9k]
# The MPI Operator's v2beta1 MPIJob, whose launcher is a batch Job's pod without an index: localkube only for
# now (the real tier's families cluster does not serve its CRD).
MPI_OPERATOR_CASE = FamilyCase(
    "MPIJob-v2beta1",
    operators.MPIJobV2Beta1Operator,
    sensors.MPIJobV2Beta1Sensor,
    mpi_operator,
    "launcher",
    "launcher",
)
# Kubeflow Trainer v2: node 0 decides (there is no launcher under torch); localkube only (the real tier's
# families cluster does not serve JobSet or the Trainer CRDs).
TRAINJOB_CASE = FamilyCase(
    "TrainJob", operators.TrainJobOperator, sensors.TrainJobSensor, trainjob, "node-0", "node-0"
)
LOCAL_CASES = [*CASES, MPI_OPERATOR_CASE, TRAINJOB_CASE]


def _kubeflow(case: KindCase) -> FamilyCase:
    """A Kubeflow v1 kind as a FamilyCase (the real tier's lifecycle tests run over every family)."""
    return FamilyCase(
        f"Kubeflow-{case.kind}",
        getattr(operators, f"{case.kind}Operator"),
        getattr(sensors, f"{case.kind}Sensor"),
        lambda: manifest(case, {}),
        case.master,
        f"{case.master.lower()}-0",
    )


KUBEFLOW_CASES = [_kubeflow(case) for case in KINDS]


# -- the family cluster ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def family_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """A localkube with the default controllers, for one test module; it also serves the MPI Operator's
    v2beta1 MPIJob (its CRD: a real cluster serves one of the two mpijobs.kubeflow.org), JobSet and the
    Trainer v2 kinds, with upstream's torch-distributed ClusterTrainingRuntime."""
    with serve(tmp_path_factory, crd_dir=list(CRD_ONLY)) as kube:
        runtimes = kube.store.resource_type("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
        kube.store.create(runtimes, "", TORCH_RUNTIME)
        kube.store.create(runtimes, "", never_restarting(TORCH_RUNTIME))
        yield kube


def never_restarting(runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime named `<name>-never` whose pods have `restartPolicy: Never` (JobSet defaults it to
    OnFailure, under which a failing node restarts until its Job's backoffLimit, then its pod is deleted)."""
    runtime = copy.deepcopy(runtime)
    runtime["metadata"]["name"] += "-never"
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return runtime


# -- reading the store -------------------------------------------------------------------------------------


def job_or_none(kube: LocalKube, case: FamilyCase, name: str) -> dict[str, Any] | None:
    resource = case.job_kind.resource
    found = kube.store.list(
        kube.store.resource_type(resource.group, resource.version, resource.plural),
        NAMESPACE,
        field_selector=f"metadata.name={name}",
    )
    return found[0] if found else None


def replica_pods(kube: LocalKube, case: FamilyCase, name: str) -> list[dict[str, Any]]:
    """The job's replica pods, found as the kind says (its selectors and ``owns_pod``)."""
    from airflow_provider_training.hooks.training import replica_selectors

    kind = case.job_kind
    pods = {
        pod["metadata"]["name"]: pod
        for selector in replica_selectors(kind, name)
        for pod in kube.store.list(PODS, NAMESPACE, label_selector=selector)
        if kind.owns_pod(name, pod)
    }
    return list(pods.values())


def running(kube: LocalKube, case: FamilyCase, name: str) -> bool:
    return any((pod.get("status") or {}).get("phase") == "Running" for pod in replica_pods(kube, case, name))


def leftovers(kube: LocalKube, case: FamilyCase, name: str) -> list[str]:
    """The job and every pod, Service, batch Job or ReplicaSet named after it or labelled with its name."""
    found = [f"{case.job_kind.kind} {name}"] if job_or_none(kube, case, name) else []
    for rt in CHILD_TYPES:
        for obj in kube.store.list(rt, NAMESPACE):
            meta = obj["metadata"]
            if meta["name"].startswith(f"{name}-") or name in (meta.get("labels") or {}).values():
                found.append(f"{rt.kind} {meta['name']}")
    return found


def names(kube: LocalKube, case: FamilyCase) -> set[str]:
    resource = case.job_kind.resource
    rt = kube.store.resource_type(resource.group, resource.version, resource.plural)
    return {job["metadata"]["name"] for job in kube.store.list(rt, NAMESPACE)}


async def kill(case: FamilyCase, name: str) -> None:
    """What a user's kill of the deferred task does: the trigger deletes the job and its children."""
    from airflow_provider_training.triggers.training import TrainingJobTrigger

    kind = case.job_kind
    trigger = TrainingJobTrigger(
        kind=kind.kind, api_version=kind.api_version, job_name=name, namespace=NAMESPACE
    )
    await trigger.on_kill()

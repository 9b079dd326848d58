"""The seven Kubeflow v1 kinds as data: names, defaults, env injection, success rules, master role."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from localkube.controllers import kubeflow_env as env
from localkube.controllers import kubeflow_rules as rules
from localkube.controllers.kubeflow_job import JobView, KindData

MasterRole = Callable[[JobView, str, int], bool]


@dataclass(frozen=True)
class KubeflowKind:
    data: KindData
    inject_env: env.EnvInjector | None
    status_rule: rules.StatusRule
    master_role: MasterRole
    mpi: bool = False  # MPIJob v1: a bare launcher pod, a hostfile ConfigMap, no Services

    @property
    def kind(self) -> str:
        return self.data.kind


def _leader_or_worker0(leaders: tuple[str, ...]) -> MasterRole:
    """The leader type's pods if the job has one, else worker 0 (TF: Chief/Master; PyTorch: Master)."""

    def role(job: JobView, rtype: str, index: int) -> bool:
        if any(job.has(t) for t in leaders):
            return rtype in leaders
        return rtype == "Worker" and index == 0

    return role


def _type_is(name: str) -> MasterRole:
    return lambda _job, rtype, _index: rtype == name


def _tf_defaults(spec: dict) -> None:
    spec.setdefault("successPolicy", "")


def _elastic_defaults(spec: dict, specs_field: str) -> None:
    policy = spec.get("elasticPolicy")
    if policy is None:
        return
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    if low is None and high is None:
        workers = (spec.get(specs_field) or {}).get("Worker") or {}
        low = high = workers.get("replicas")
    policy["minReplicas"] = high if low is None else low
    policy["maxReplicas"] = low if high is None else high


def _pytorch_defaults(spec: dict) -> None:
    _elastic_defaults(spec, "pytorchReplicaSpecs")
    elastic = spec.get("elasticPolicy")
    if (elastic is None or elastic.get("nProcPerNode") is None) and spec.get("nprocPerNode") is None:
        spec["nprocPerNode"] = "auto"


def _paddle_defaults(spec: dict) -> None:
    _elastic_defaults(spec, "paddleReplicaSpecs")


def _mpi_defaults(spec: dict) -> None:
    """The deprecated top-level cleanPodPolicy and runPolicy.cleanPodPolicy are kept in sync."""
    policy = (spec.get("runPolicy") or {}).get("cleanPodPolicy") or spec.get("cleanPodPolicy") or "None"
    spec["cleanPodPolicy"] = policy
    spec.setdefault("runPolicy", {})["cleanPodPolicy"] = policy


TFJOB = KubeflowKind(
    KindData(
        "TFJob",
        "tfjobs",
        "tfReplicaSpecs",
        ("Chief", "Evaluator", "Master", "PS", "Worker"),
        "tensorflow",
        "tfjob-port",
        2222,
        "Never",
        extra_defaults=_tf_defaults,
    ),
    env.tensorflow,
    rules.tensorflow,
    _leader_or_worker0(("Chief", "Master")),
)
PYTORCHJOB = KubeflowKind(
    KindData(
        "PyTorchJob",
        "pytorchjobs",
        "pytorchReplicaSpecs",
        ("Master", "Worker"),
        "pytorch",
        "pytorchjob-port",
        23456,
        "OnFailure",
        extra_defaults=_pytorch_defaults,
    ),
    env.pytorch,
    rules.master_or_workers("Master", elastic=True),
    _leader_or_worker0(("Master",)),
)
MXJOB = KubeflowKind(
    KindData(
        "MXJob",
        "mxjobs",
        "mxReplicaSpecs",
        ("Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"),
        "mxnet",
        "mxjob-port",
        9091,
        "Never",
        camel_case=("Scheduler", "Server", "Worker"),
    ),
    env.mxnet,
    rules.leader(rules.mxnet_leader),
    _type_is("Server"),
)
XGBOOSTJOB = KubeflowKind(
    KindData(
        "XGBoostJob",
        "xgboostjobs",
        "xgbReplicaSpecs",
        ("Master", "Worker"),
        "xgboost",
        "xgboostjob-port",
        9999,
        "Never",
    ),
    env.xgboost,
    rules.leader(rules.is_type("Master"), running_first=True),
    _type_is("Master"),
)
PADDLEJOB = KubeflowKind(
    KindData(
        "PaddleJob",
        "paddlejobs",
        "paddleReplicaSpecs",
        ("Master", "Worker"),
        "paddle",
        "master",
        36543,
        "OnFailure",
        extra_defaults=_paddle_defaults,
    ),
    env.paddle,
    rules.master_or_workers("Master"),
    _type_is("Master"),
)
MPIJOB = KubeflowKind(
    KindData(
        "MPIJob",
        "mpijobs",
        "mpiReplicaSpecs",
        ("Launcher", "Worker"),
        "mpi",
        "mpi-port",
        9999,
        "Never",
        camel_case=(),
        default_replicas={"Launcher": 1, "Worker": 0},
        port_defaulting=False,
        extra_defaults=_mpi_defaults,
    ),
    None,
    rules.leader(rules.is_type("Launcher"), failed_reason="MPIJobMPIJobFailed"),
    _type_is("Launcher"),
    mpi=True,
)
JAXJOB = KubeflowKind(
    KindData("JAXJob", "jaxjobs", "jaxReplicaSpecs", ("Worker",), "jax", "jaxjob-port", 6666, "Never"),
    env.jax,
    rules.master_or_workers(None),
    lambda _job, _rtype, index: index == 0,
)

KUBEFLOW_KINDS: tuple[KubeflowKind, ...] = (TFJOB, PYTORCHJOB, MXJOB, XGBOOSTJOB, PADDLEJOB, MPIJOB, JAXJOB)

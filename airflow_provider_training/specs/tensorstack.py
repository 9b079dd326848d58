"""Spec models of the TensorStack T9k training jobs (``batch.tensorstack.dev/v1beta1``):
TensorFlowTrainingJob, PyTorchTrainingJob and XGBoostTrainingJob. The other T9k kinds (DeepSpeedJob,
ColossalAIJob, MPIJob, GenericJob) have no model: their manifests are checked for the job name only and
passed through.

``replicaSpecs`` is a list of ``{type, replicas, restartPolicy, template}`` with lower-case types. The run
modes (``runMode.debug`` / ``runMode.pause``) and ``torchrunConfig`` / ``elastic`` accept ``enabled`` and the
pre-2024 spelling ``enable``, as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from airflow_provider_training.kinds.tensorstack import GROUP, VERSION
from airflow_provider_training.specs.common import (
    JobModel,
    PodTemplate,
    Replica,
    RestartPolicy,
    SpecModel,
    count_errors,
)
from airflow_provider_training.specs.errors import FieldErrors

CleanUpPolicy = Literal["None", "All", "Unfinished"]
_PROC_PER_NODE = re.compile(r"^(\d+|gpu)$")


class T9kReplicaSpec(SpecModel):
    """One entry of ``replicaSpecs``; ``replicas`` defaults to 1."""

    type: str
    replicas: int | None = Field(None, ge=0)
    template: PodTemplate = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = Field(None, alias="restartPolicy")


class PyTorchReplicaSpec(T9kReplicaSpec):
    scaling_weight: int | None = Field(None, alias="scalingWeight", ge=0)


class Switch(SpecModel):
    """Something turned on by ``enabled`` (``enable`` before the 2024 rename)."""

    enabled: bool | None = None
    enable: bool | None = None

    @property
    def on(self) -> bool:
        return bool(self.enabled or self.enable)


class ReplicaDebugSet(SpecModel):
    type: str
    skip_init_container: bool | None = Field(None, alias="skipInitContainer")
    command: list[str] | None = None  # default ["sleep", "inf"]


class ResumeSpec(ReplicaDebugSet):
    args: list[str] | None = None


class DebugMode(Switch):
    replica_specs: list[ReplicaDebugSet] | None = Field(None, alias="replicaSpecs")


class PauseMode(Switch):
    resume_specs: list[ResumeSpec] | None = Field(None, alias="resumeSpecs")


class RunMode(SpecModel):
    """Immediate mode is ``runMode`` omitted or neither mode enabled."""

    debug: DebugMode | None = None
    pause: PauseMode | None = None


class T9kRunPolicy(SpecModel):
    active_deadline_seconds: int | None = Field(None, alias="activeDeadlineSeconds", ge=1)
    backoff_limit: int | None = Field(None, alias="backoffLimit", ge=0)
    clean_up_policy: CleanUpPolicy | None = Field(None, alias="cleanUpPolicy")


class T9kScheduler(SpecModel):
    queue: str | None = None
    priority: int | None = Field(None, ge=0, le=100)


class SchedulePolicy(SpecModel):
    t9k_scheduler: T9kScheduler | None = Field(None, alias="t9kScheduler")


class TensorBoardSpec(SpecModel):
    training_log_filesets: list[str] | None = Field(None, alias="trainingLogFilesets")
    log_dir: dict[str, Any] | None = Field(None, alias="logDir")
    image: str | None = None
    suspend: bool | None = None
    scheduler: SchedulePolicy | None = None
    resources: dict[str, Any] | None = None
    run_mode: str | None = Field(None, alias="runMode")  # before ``suspend`` (2023)


class TorchrunConfig(Switch):
    max_restarts: int | None = Field(None, alias="maxRestarts", ge=0)
    proc_per_node: str | None = Field(None, alias="procPerNode")  # a number or "gpu"
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = Field(None, alias="rdzvBackend")
    extra_options: list[str] | None = Field(None, alias="extraOptions")

    @field_validator("proc_per_node", mode="before")
    @classmethod
    def _proc_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("proc_per_node")
    @classmethod
    def _proc_value(cls, value: str | None) -> str | None:
        if value is not None and not _PROC_PER_NODE.match(value):
            raise ValueError(f"must be a number or 'gpu' (got {value!r})")
        return value


class T9kElastic(Switch):
    min_replicas: int | None = Field(None, alias="minReplicas", ge=1)
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=1)
    expected_replicas: int | None = Field(None, alias="expectedReplicas", ge=1)


class T9kSpec(SpecModel):
    replica_specs: list[T9kReplicaSpec] = Field(alias="replicaSpecs")
    run_mode: RunMode | None = Field(None, alias="runMode")
    run_policy: T9kRunPolicy | None = Field(None, alias="runPolicy")
    scheduler: SchedulePolicy | None = None


class TensorFlowTrainingJobSpec(T9kSpec):
    tensorboard_spec: TensorBoardSpec | None = Field(None, alias="tensorboardSpec")


class PyTorchTrainingJobSpec(T9kSpec):
    replica_specs: list[PyTorchReplicaSpec] = Field(alias="replicaSpecs")  # type: ignore[assignment]
    tensorboard_spec: TensorBoardSpec | None = Field(None, alias="tensorboardSpec")
    torchrun_config: TorchrunConfig | None = Field(None, alias="torchrunConfig")
    elastic: T9kElastic | None = None


class XGBoostTrainingJobSpec(T9kSpec):
    pass


class T9kJob(JobModel):
    """A T9k training job: replicas from the ``replicaSpecs`` list, one entry per type."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    spec: T9kSpec

    def replicas(self) -> list[Replica]:
        return [
            Replica(
                path=f"spec.replicaSpecs[{index}]",
                type=spec.type,
                replicas=spec.replicas,
                template=spec.template,
            )
            for index, spec in enumerate(self.spec.replica_specs)
        ]

    def replica(self, type_: str) -> Replica | None:
        return next((replica for replica in self.replicas() if replica.type == type_), None)

    @classmethod
    def pack_replica_specs(cls, by_type: dict[str, dict[str, Any]]) -> Any:
        return [{"type": type_, **spec} for type_, spec in by_type.items()]

    def rule_errors(self) -> FieldErrors:
        return duplicate_type_errors(self.replicas()) + self.run_mode_errors() + self.kind_rule_errors()

    def kind_rule_errors(self) -> FieldErrors:
        return []

    def run_mode_errors(self) -> FieldErrors:
        """Debug and resume overrides must name replica types the job has."""
        run_mode = self.spec.run_mode
        if run_mode is None:
            return []
        types = [replica.type for replica in self.replicas()]
        overrides: list[tuple[str, Iterable[ReplicaDebugSet] | None]] = [
            ("spec.runMode.debug.replicaSpecs", run_mode.debug.replica_specs if run_mode.debug else None),
            ("spec.runMode.pause.resumeSpecs", run_mode.pause.resume_specs if run_mode.pause else None),
        ]
        return [
            (
                f"{path}[{index}].type",
                f"must be a replica type of this job: {', '.join(types)} (got {entry.type!r})",
            )
            for path, entries in overrides
            for index, entry in enumerate(entries or [])
            if entry.type not in types
        ]


def duplicate_type_errors(replicas: list[Replica]) -> FieldErrors:
    """Each replica type at most once: the controller names pods ``<job>-<type>-<index>``."""
    first: dict[str, str] = {}
    errors: FieldErrors = []
    for replica in replicas:
        if replica.type in first:
            errors.append(
                (f"{replica.path}.type", f"{replica.type!r} is already defined at {first[replica.type]}")
            )
        first.setdefault(replica.type, replica.path)
    return errors


class TensorFlowTrainingJob(T9kJob):
    """Types chief, worker, ps, evaluator; every template has a container named ``tensorflow``."""

    KIND: ClassVar[str] = "TensorFlowTrainingJob"
    spec: TensorFlowTrainingJobSpec

    def kind_rule_errors(self) -> FieldErrors:
        chief = self.replica("chief")
        return count_errors(chief, exactly=1) if chief is not None else []


class PyTorchTrainingJob(T9kJob):
    """Free replica type names (``master``, ``worker``, ``node``, ...); the first is the master. The
    main container is the torchrun ``python`` one or the first, so no container name is required."""

    KIND: ClassVar[str] = "PyTorchTrainingJob"
    spec: PyTorchTrainingJobSpec

    def allowed_replica_types(self) -> tuple[str, ...] | None:
        return None

    def default_container_required(self, replica: Replica) -> str | None:
        return None

    def kind_rule_errors(self) -> FieldErrors:
        elastic = self.spec.elastic
        if elastic is None or not elastic.on:
            return []
        errors: FieldErrors = []
        torchrun = self.spec.torchrun_config
        if torchrun is None or not torchrun.on:
            errors.append(("spec.torchrunConfig.enabled", "must be true when spec.elastic is enabled"))
        low, high, expected = elastic.min_replicas, elastic.max_replicas, elastic.expected_replicas
        if low is not None and high is not None and low > high:
            errors.append(("spec.elastic.maxReplicas", f"must be at least minReplicas {low} (got {high})"))
        if expected is not None and (
            (low is not None and expected < low) or (high is not None and expected > high)
        ):
            errors.append(
                (
                    "spec.elastic.expectedReplicas",
                    f"must be between minReplicas and maxReplicas (got {expected})",
                )
            )
        return errors


class XGBoostTrainingJob(T9kJob):
    """Exactly one ``master`` (it decides the outcome), any number of workers; container ``xgboost``."""

    KIND: ClassVar[str] = "XGBoostTrainingJob"
    spec: XGBoostTrainingJobSpec

    def kind_rule_errors(self) -> FieldErrors:
        master = self.replica("master")
        if master is None:
            return [("spec.replicaSpecs", "must include a replica of type 'master' (it decides the outcome)")]
        return count_errors(master, exactly=1)


MODELS: tuple[type[JobModel], ...] = (TensorFlowTrainingJob, PyTorchTrainingJob, XGBoostTrainingJob)

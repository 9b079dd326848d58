"""Spec models of the kubeflow.org/v1 kinds, with the training operator's webhook rules.

The replica map's key differs per kind (``tfReplicaSpecs``, ``pytorchReplicaSpecs``, ...) and comes from the
kind table in :mod:`airflow_provider_training.kinds.kubeflow`; replica-type keys are written in the kind's
casing (``worker`` becomes ``Worker``, as the operator's defaulting does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from airflow_provider_training.kinds.common import canonical_type
from airflow_provider_training.kinds.kubeflow import GROUP, LAYOUT_BY_KIND, VERSION
from airflow_provider_training.specs.common import (
    CleanPodPolicy,
    JobModel,
    Replica,
    ReplicaSpec,
    RunPolicy,
    SpecModel,
    count_errors,
)
from airflow_provider_training.specs.errors import FieldErrors

ReplicaSpecs = dict[str, ReplicaSpec]


class ElasticPolicy(SpecModel):
    """PaddleJob's ``elasticPolicy``; PyTorchJob's adds the rendezvous settings."""

    min_replicas: int | None = Field(None, alias="minReplicas", ge=0)
    max_replicas: int | None = Field(None, alias="maxReplicas", ge=0)
    max_restarts: int | None = Field(None, alias="maxRestarts", ge=0)
    metrics: list[dict[str, Any]] | None = None  # autoscaling/v2 MetricSpec list


class RdzvConf(SpecModel):
    key: str | None = None
    value: str | None = None


class PyTorchElasticPolicy(ElasticPolicy):
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = Field(None, alias="rdzvBackend")
    rdzv_port: int | None = Field(None, alias="rdzvPort")
    rdzv_host: str | None = Field(None, alias="rdzvHost")
    rdzv_id: str | None = Field(None, alias="rdzvId")
    rdzv_conf: list[RdzvConf] | None = Field(None, alias="rdzvConf")
    standalone: bool | None = None
    n_proc_per_node: int | None = Field(None, alias="nProcPerNode")  # deprecated: use spec.nprocPerNode


class KubeflowSpec(SpecModel):
    """What every kubeflow.org/v1 spec has; each kind names ``replica_specs`` with its own JSON key."""

    run_policy: RunPolicy | None = Field(None, alias="runPolicy")
    replica_specs: ReplicaSpecs


class TFJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="tfReplicaSpecs")
    success_policy: Literal["", "AllWorkers"] | None = Field(None, alias="successPolicy")
    enable_dynamic_worker: bool | None = Field(None, alias="enableDynamicWorker")


class PyTorchJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="pytorchReplicaSpecs")
    elastic_policy: PyTorchElasticPolicy | None = Field(None, alias="elasticPolicy")
    nproc_per_node: str | None = Field(None, alias="nprocPerNode")

    @field_validator("nproc_per_node", mode="before")
    @classmethod
    def _nproc_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("nproc_per_node")
    @classmethod
    def _nproc_value(cls, value: str | None) -> str | None:
        if (
            value is not None
            and value not in ("auto", "cpu", "gpu")
            and not (value.isdigit() and int(value) > 0)
        ):
            raise ValueError(f"must be 'auto', 'cpu', 'gpu' or a positive integer (got {value!r})")
        return value


class MXJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="mxReplicaSpecs")
    job_mode: Literal["MXTrain", "MXTune"] = Field(alias="jobMode")


class XGBoostJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="xgbReplicaSpecs")


class PaddleJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="paddleReplicaSpecs")
    elastic_policy: ElasticPolicy | None = Field(None, alias="elasticPolicy")


class MPIJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="mpiReplicaSpecs")
    slots_per_worker: int | None = Field(None, alias="slotsPerWorker", ge=1)
    clean_pod_policy: CleanPodPolicy | None = Field(
        None, alias="cleanPodPolicy"
    )  # deprecated copy of runPolicy's
    main_container: str | None = Field(None, alias="mainContainer")


class JAXJobSpec(KubeflowSpec):
    replica_specs: ReplicaSpecs = Field(alias="jaxReplicaSpecs")


class KubeflowJob(JobModel):
    """A kubeflow.org/v1 job: replicas from the kind's replica map, defaults from the kind table."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    UNINDEXED: ClassVar[tuple[str, ...]] = ()  # replica types whose pod names have no "-<index>"
    spec: KubeflowSpec

    @model_validator(mode="before")
    @classmethod
    def _canonical_replica_types(cls, data: Any) -> Any:
        spec = data.get("spec") if isinstance(data, Mapping) else None
        key = LAYOUT_BY_KIND[cls.KIND].replica_spec_key
        if not isinstance(spec, Mapping) or not isinstance(spec.get(key), Mapping):
            return data
        canonical: dict[str, Any] = {}
        for name, replica in spec[key].items():
            # A key that would collide with one already written in the kind's casing stays as it is (and is
            # then refused as an unknown type) rather than silently replacing the other.
            type_ = canonical_type(str(name), LAYOUT_BY_KIND[cls.KIND].replica_types)
            canonical[name if type_ in spec[key] and type_ != name else type_] = replica
        return {**data, "spec": {**spec, key: canonical}}

    def replicas(self) -> list[Replica]:
        layout = LAYOUT_BY_KIND[self.KIND]
        return [
            Replica(
                path=f"spec.{layout.replica_spec_key}.{type_}",
                type=type_,
                replicas=spec.replicas,
                template=spec.template,
                default=layout.default_replicas(type_),
                indexed=type_ not in self.UNINDEXED,
            )
            for type_, spec in self.spec.replica_specs.items()
        ]

    def replica(self, type_: str) -> Replica | None:
        return next((replica for replica in self.replicas() if replica.type == type_), None)

    def required_replica(self, type_: str) -> FieldErrors:
        if self.replica(type_) is not None:
            return []
        layout = LAYOUT_BY_KIND[self.KIND]
        return [
            (f"spec.{layout.replica_spec_key}.{type_}", f"required: a {self.KIND} needs a {type_} replica")
        ]


class TFJob(KubeflowJob):
    KIND: ClassVar[str] = "TFJob"
    spec: TFJobSpec

    def rule_errors(self) -> FieldErrors:
        chiefs = [replica.type for replica in self.replicas() if replica.type in ("Chief", "Master")]
        if len(chiefs) < 2:
            return []
        return [
            (
                "spec.tfReplicaSpecs",
                "must not have more than one Chief or Master (Master is Chief's old name)",
            )
        ]


class PyTorchJob(KubeflowJob):
    KIND: ClassVar[str] = "PyTorchJob"
    spec: PyTorchJobSpec

    def rule_errors(self) -> FieldErrors:
        errors: FieldErrors = []
        for replica in self.replicas():
            if replica.type == "Master":
                errors += count_errors(replica, exactly=1, unset_ok=False)
            elif replica.type == "Worker":
                errors += count_errors(replica, at_least=1)
        elastic = self.spec.elastic_policy
        if elastic is not None:
            if self.replica("Worker") is None:
                errors.append(("spec.pytorchReplicaSpecs.Worker", "required when spec.elasticPolicy is set"))
            if elastic.n_proc_per_node is not None and self.spec.nproc_per_node is not None:
                errors.append(
                    (
                        "spec.elasticPolicy.nProcPerNode",
                        "must not be set together with spec.nprocPerNode (it is deprecated; keep the latter)",
                    )
                )
        return errors


class MXJob(KubeflowJob):
    """MXJob (training operator <= 1.8.1). Its webhook only warns, so any container name is accepted."""

    KIND: ClassVar[str] = "MXJob"
    spec: MXJobSpec

    def default_container_required(self, replica: Replica) -> str | None:
        return None


class XGBoostJob(KubeflowJob):
    KIND: ClassVar[str] = "XGBoostJob"
    spec: XGBoostJobSpec

    def rule_errors(self) -> FieldErrors:
        master = self.replica("Master")
        if master is None:
            return self.required_replica("Master")
        return count_errors(master, exactly=1, unset_ok=False)


class PaddleJob(KubeflowJob):
    KIND: ClassVar[str] = "PaddleJob"
    spec: PaddleJobSpec


class MPIJob(KubeflowJob):
    """MPIJob v1. No webhook: the controller refuses a bad one silently (an event, no condition), so checking
    here matters most. Containers need a name and an image, but none has to be called ``mpi``."""

    KIND: ClassVar[str] = "MPIJob"
    UNINDEXED: ClassVar[tuple[str, ...]] = ("Launcher",)
    spec: MPIJobSpec

    def default_container_required(self, replica: Replica) -> str | None:
        return None

    def rule_errors(self) -> FieldErrors:
        launcher = self.replica("Launcher")
        if launcher is None:
            return self.required_replica("Launcher")
        return count_errors(launcher, exactly=1)


class JAXJob(KubeflowJob):
    KIND: ClassVar[str] = "JAXJob"
    spec: JAXJobSpec


MODELS: tuple[type[JobModel], ...] = (TFJob, PyTorchJob, MXJob, XGBoostJob, PaddleJob, MPIJob, JAXJob)

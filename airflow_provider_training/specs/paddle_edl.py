"""Spec model of the PaddlePaddle EDL ``TrainingJob`` (``paddlepaddle.org/v1``), both JSON lineages.

Keys exactly as the Go types marshal them: ``min-instance``, ``max-instance``, ``ports_num``,
``ports_num_for_sparse``, ``fault_tolerant``, ``etcd-endpoint``, ``VolumeMounts``, ``imagePullSecrets`` (a
list); ``HostNetwork`` (resource lineage, untagged) or ``host_network`` (CRD lineage); the CRD lineage adds
``NodeSelector`` and the ``replicaSpec`` the controller fills in.

The EDL controller never calls its ``Validate()``, so it applies no defaults: this model fills them (``image``
paddlepaddle/paddlecloud-job, ``port`` 7164, ``ports_num`` 1, ``ports_num_for_sparse`` 1, ``passes`` 1) so
that the trainers get usable ``PADDLE_INIT_*`` env.

The upstream example writes ``passes`` under ``trainer:``, where the API silently drops it. This model moves
it to ``spec.passes`` (when that is unset) and logs a warning, so the example trains for the passes it asks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, model_validator

from airflow_provider_training.kinds.paddle_edl import GROUP, KIND, SUFFIXES, VERSION
from airflow_provider_training.specs.common import (
    MAX_NAME_LENGTH,
    JobModel,
    Replica,
    SpecModel,
    name_errors,
    to_plain,
)
from airflow_provider_training.specs.errors import FieldErrors

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "paddlepaddle/paddlecloud-job"
DEFAULT_PORT = 7164

Plain = Annotated[dict[str, Any], BeforeValidator(to_plain)]
"""A Kubernetes object (Volume, VolumeMount, ResourceRequirements, ...) as a dict or a client model."""


class LocalObjectReference(SpecModel):
    name: str


class TrainerSpec(SpecModel):
    entrypoint: str  # the trainers run it (env ENTRY)
    workspace: str | None = None  # env TRAINER_PACKAGE
    min_instance: int = Field(alias="min-instance", ge=1)  # the trainer Job's parallelism
    max_instance: int | None = Field(None, alias="max-instance", ge=1)  # elastic when above min-instance
    resources: Plain | None = None
    etcd_endpoint: str | None = Field(None, alias="etcd-endpoint")  # CRD lineage
    replica_spec: Plain | None = Field(None, alias="replicaSpec")  # CRD lineage: filled by the controller


class PserverSpec(SpecModel):
    min_instance: int | None = Field(None, alias="min-instance", ge=0)  # the pserver ReplicaSet's replicas
    max_instance: int | None = Field(None, alias="max-instance", ge=0)  # unused: pservers never scale
    resources: Plain | None = None
    replica_spec: Plain | None = Field(None, alias="replicaSpec")


class MasterSpec(SpecModel):
    etcd_endpoint: str | None = Field(None, alias="etcd-endpoint")  # unused by the controller
    resources: Plain | None = None
    replica_spec: Plain | None = Field(None, alias="replicaSpec")


class TrainingJobSpec(SpecModel):
    image: str = DEFAULT_IMAGE
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    ports_num: int = Field(1, ge=1)
    ports_num_for_sparse: int = Field(1, ge=0)
    fault_tolerant: bool | None = None
    passes: int = Field(1, ge=1)
    volumes: list[Plain] | None = None
    volume_mounts: list[Plain] | None = Field(None, alias="VolumeMounts")
    image_pull_secrets: list[LocalObjectReference] | None = Field(None, alias="imagePullSecrets")
    host_network_resource: bool | None = Field(None, alias="HostNetwork")  # resource lineage
    host_network: bool | None = None  # CRD lineage
    node_selector: dict[str, str] | None = Field(None, alias="NodeSelector")  # CRD lineage
    trainer: TrainerSpec
    pserver: PserverSpec | None = None
    master: MasterSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _passes_under_trainer(cls, data: Any) -> Any:
        """``trainer.passes`` (as in the upstream example) moves to ``spec.passes``; the API would drop it."""
        trainer = data.get("trainer") if isinstance(data, Mapping) else None
        if not isinstance(trainer, Mapping) or "passes" not in trainer:
            return data
        passes = trainer["passes"]
        data = {**data, "trainer": {key: value for key, value in trainer.items() if key != "passes"}}
        if "passes" in data:
            log.warning(
                "TrainingJob spec.trainer.passes (%r) is not an API field and is dropped; spec.passes (%r) "
                "stays",
                passes,
                data["passes"],
            )
            return data
        log.warning(
            "TrainingJob spec.trainer.passes is not an API field (the EDL controller would drop it): "
            "moved to spec.passes = %r",
            passes,
        )
        return {**data, "passes": passes}


class TrainingJob(JobModel):
    """An EDL TrainingJob. It has no pod templates: the controller builds the trainer Job and the master and
    pserver ReplicaSets from ``image``, ``trainer``/``pserver``/``master`` and the ports."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = KIND
    spec: TrainingJobSpec

    def children(self) -> list[Replica]:
        """The controller's children as name suffixes, for the name length check (``<job>-trainer`` is also
        the ``job-name`` label of the trainer pods, so it must stay within 63 characters)."""
        return [
            Replica(path=f"spec.{type_.lower()}", type=type_, replicas=None, template={}, indexed=False)
            for type_ in SUFFIXES
        ]

    def errors(self) -> FieldErrors:
        """The job name and the rules; no replica templates to check."""
        return name_errors(self.metadata.name, self.children()) + self.rule_errors()

    def name_limit(self) -> int:
        return MAX_NAME_LENGTH - max(len(suffix) for suffix in SUFFIXES.values())

    def rule_errors(self) -> FieldErrors:
        spec = self.spec
        both = (spec.host_network_resource, spec.host_network)
        if None not in both and both[0] != both[1]:
            return [
                (
                    "spec.host_network",
                    f"must equal spec.HostNetwork when both are set (got {both[1]} and {both[0]}): the "
                    "resource lineage reads HostNetwork, the CRD lineage host_network",
                )
            ]
        return []


MODELS: tuple[type[JobModel], ...] = (TrainingJob,)

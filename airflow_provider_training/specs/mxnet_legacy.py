"""Spec models of the legacy MXNet jobs: ``mxnet.mlkube.io/v1beta1`` MxJob, ``kubeflow.org/v1alpha1`` MXJob.

Keys as the Go types marshal them: ``replicaSpecs`` is a list, ``mxReplicaType`` is SCHEDULER, SERVER or
WORKER (default WORKER), ``PsRootPort`` and ``RuntimeId`` are capitalised (untagged Go fields). Both operators
overwrite the first entries of a container's ``env`` with the DMLC_* variables and crash on a shorter,
non-empty list, which is refused here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from airflow_provider_training.kinds.mxnet_legacy import MLKUBE, V1ALPHA1, chief
from airflow_provider_training.specs.common import JobModel, PodTemplate, Replica, SpecModel, count_errors
from airflow_provider_training.specs.errors import FieldErrors

MxReplicaType = Literal["SCHEDULER", "SERVER", "WORKER"]
DIST_TYPES: tuple[str, ...] = ("SCHEDULER", "SERVER", "WORKER")
GENERATED_RUNTIME_ID = "xxxx"  # stands for the 4 random characters the operator picks when RuntimeId is empty
_RUNTIME_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
V1ALPHA1_NAME_LIMIT = 40


class MxReplicaSpec(SpecModel):
    replicas: int | None = Field(None, ge=0)
    template: PodTemplate = Field(default_factory=dict)
    ps_root_port: int | None = Field(None, alias="PsRootPort", ge=1, le=65535)
    mx_replica_type: MxReplicaType | None = Field(None, alias="mxReplicaType")


class LegacySpec(SpecModel):
    runtime_id: str | None = Field(None, alias="RuntimeId")
    replica_specs: list[MxReplicaSpec] = Field(alias="replicaSpecs")


class MxJobSpec(LegacySpec):
    job_mode: Literal["local", "dist"] = Field(alias="jobMode")


class ChiefSpec(SpecModel):
    replica_name: MxReplicaType | None = Field(None, alias="replicaName")
    replica_index: int | None = Field(None, alias="replicaIndex", ge=0)


class TerminationPolicy(SpecModel):
    chief: ChiefSpec | None = None


class MXJobV1Alpha1Spec(LegacySpec):
    mx_image: str | None = Field(None, alias="mxImage")
    termination_policy: TerminationPolicy | None = Field(None, alias="terminationPolicy")
    cleanup_pod_policy: Literal["", "All", "Running", "None"] | None = Field(None, alias="cleanupPodPolicy")
    scheduler_name: str | None = Field(None, alias="schedulerName")
    # Not in v1alpha1's type, so its operator ignores it, but upstream's examples carry it: accepted, never
    # sent (a CRD with a schema lacks it, and a strict create refuses it).
    job_mode: Literal["local", "dist"] | None = Field(None, alias="jobMode", exclude=True)


@dataclass(frozen=True)
class MxReplica(Replica):
    """A replica whose objects are named ``<job>-<type>-<RuntimeId>-<index>``."""

    runtime_id: str = GENERATED_RUNTIME_ID

    @property
    def longest_pod_suffix(self) -> str:
        return f"-{self.type.lower()}-{self.runtime_id}-{max(self.count - 1, 0)}"


class LegacyMxJob(JobModel):
    """What both legacy lineages share: the replica list, its types and the env the operator overwrites."""

    spec: LegacySpec
    ENV_SLOTS: ClassVar[int]

    def replicas(self) -> list[Replica]:
        return [
            MxReplica(
                path=f"spec.replicaSpecs[{index}]",
                type=spec.mx_replica_type or "WORKER",
                replicas=spec.replicas,
                template=spec.template,
                runtime_id=self.spec.runtime_id or GENERATED_RUNTIME_ID,
            )
            for index, spec in enumerate(self.spec.replica_specs)
        ]

    def replica(self, type_: str) -> Replica | None:
        return next((replica for replica in self.replicas() if replica.type == type_), None)

    def replica_spec(self, type_: str) -> MxReplicaSpec | None:
        return next((s for s in self.spec.replica_specs if (s.mx_replica_type or "WORKER") == type_), None)

    def missing_types_errors(self, why: str) -> FieldErrors:
        present = {replica.type for replica in self.replicas()}
        missing = [type_ for type_ in DIST_TYPES if type_ not in present]
        if not missing:
            return []
        return [
            (
                "spec.replicaSpecs",
                f"must include SCHEDULER, SERVER and WORKER {why} (missing {', '.join(missing)})",
            )
        ]

    @classmethod
    def pack_replica_specs(cls, by_type: dict[str, dict[str, Any]]) -> Any:
        return [{"mxReplicaType": type_, **spec} for type_, spec in by_type.items()]

    def rule_errors(self) -> FieldErrors:
        errors = self.runtime_id_errors()
        seen: dict[str, str] = {}
        for replica in self.replicas():
            if replica.type in seen:
                errors.append(
                    (
                        f"{replica.path}.mxReplicaType",
                        f"{replica.type} is already defined at {seen[replica.type]}",
                    )
                )
            seen.setdefault(replica.type, replica.path)
            errors += self.env_errors(replica)
        return errors + self.lineage_errors()

    def lineage_errors(self) -> FieldErrors:
        return []

    def runtime_id_errors(self) -> FieldErrors:
        runtime_id = self.spec.runtime_id
        if not runtime_id or _RUNTIME_ID.match(runtime_id):
            return []
        return [
            (
                "spec.RuntimeId",
                "must be lower-case letters, digits and '-' (it is part of every replica object's name; "
                f"got {runtime_id!r})",
            )
        ]

    def env_containers(self, replica: Replica) -> list[tuple[int, Mapping[str, Any]]]:
        """The containers whose env the operator overwrites."""
        containers = (replica.template.get("spec") or {}).get("containers") or []
        return [(i, c) for i, c in enumerate(containers) if isinstance(c, Mapping)]

    def env_errors(self, replica: Replica) -> FieldErrors:
        errors: FieldErrors = []
        for index, container in self.env_containers(replica):
            env = container.get("env") or []
            if 0 < len(env) < self.ENV_SLOTS:
                errors.append(
                    (
                        f"{replica.path}.template.spec.containers[{index}].env",
                        f"must be empty or have at least {self.ENV_SLOTS} entries: the operator overwrites "
                        f"the first {self.ENV_SLOTS} with the DMLC_* variables and crashes on a shorter list "
                        f"(got {len(env)}); put placeholders first if you need your own",
                    )
                )
        return errors


class MxJob(LegacyMxJob):
    """``mxnet.mlkube.io/v1beta1`` (deepinsight/mxnet-operator): ``jobMode`` local (one WORKER) or dist
    (SCHEDULER, SERVER and WORKER; only the SCHEDULER gets a Service). One batch Job per replica index."""

    API_VERSION: ClassVar[str] = MLKUBE.api_version
    KIND: ClassVar[str] = MLKUBE.kind
    ENV_SLOTS: ClassVar[int] = 5
    spec: MxJobSpec

    def env_containers(self, replica: Replica) -> list[tuple[int, Mapping[str, Any]]]:
        """Dist mode only, the ``mxnet`` container only."""
        if self.spec.job_mode != "dist":
            return []
        return [(i, c) for i, c in super().env_containers(replica) if c.get("name") == "mxnet"]

    def lineage_errors(self) -> FieldErrors:
        replicas = self.replicas()
        if self.spec.job_mode == "local":
            errors: FieldErrors = [
                (f"{r.path}.mxReplicaType", f"must be WORKER in local mode (got {r.type})")
                for r in replicas
                if r.type != "WORKER"
            ]
            worker = self.replica("WORKER")
            if worker is not None and worker.count > 1:
                errors.append(
                    (f"{worker.path}.replicas", f"must be at most 1 in local mode (got {worker.count})")
                )
            return errors
        errors = self.missing_types_errors("in dist mode")
        scheduler = self.replica("SCHEDULER")
        return errors + (count_errors(scheduler, exactly=1) if scheduler is not None else [])


class MXJobV1Alpha1(LegacyMxJob):
    """``kubeflow.org/v1alpha1`` (kubeflow/mxnet-operator, 2018): Pods and Services for every replica; the
    ``terminationPolicy.chief`` replica (default WORKER 0) decides. ``jobMode`` is accepted and ignored."""

    API_VERSION: ClassVar[str] = V1ALPHA1.api_version
    KIND: ClassVar[str] = V1ALPHA1.kind
    ENV_SLOTS: ClassVar[int] = 6
    spec: MXJobV1Alpha1Spec

    def lineage_errors(self) -> FieldErrors:
        # A missing type leaves its DMLC_* env entry without a name, which makes every pod invalid.
        errors = self.missing_types_errors("(the operator writes an env entry for each)")
        scheduler = self.replica("SCHEDULER")
        if scheduler is not None:
            errors += count_errors(scheduler, exactly=1)
            if (spec := self.replica_spec("SCHEDULER")) is not None and spec.ps_root_port is None:
                errors.append((f"{scheduler.path}.PsRootPort", "required for the SCHEDULER"))
        return errors + self.chief_errors() + self.name_length_errors()

    def chief_errors(self) -> FieldErrors:
        chief_type, chief_index = chief(self.model_dump(by_alias=True, exclude_none=True), V1ALPHA1)
        replica = self.replica(chief_type)
        path = "spec.terminationPolicy.chief"
        if replica is None:
            return [(f"{path}.replicaName", f"must name a replica type of this job (got {chief_type})")]
        if chief_index >= replica.count:
            return [
                (
                    f"{path}.replicaIndex",
                    f"must be below {chief_type}'s {replica.count} replicas (got {chief_index})",
                )
            ]
        return []

    def name_length_errors(self) -> FieldErrors:
        name = self.metadata.name
        if name is None or len(name) <= V1ALPHA1_NAME_LIMIT:
            return []
        return [
            (
                "metadata.name",
                f"must be at most {V1ALPHA1_NAME_LIMIT} characters: the operator cuts Service names to "
                f"the first {V1ALPHA1_NAME_LIMIT} characters of the job name but not DMLC_PS_ROOT_URI, so "
                f"the workers would not find the scheduler (got {len(name)})",
            )
        ]

    def name_limit(self) -> int:
        return min(super().name_limit(), V1ALPHA1_NAME_LIMIT)


MODELS: tuple[type[JobModel], ...] = (MxJob, MXJobV1Alpha1)

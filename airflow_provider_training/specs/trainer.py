"""Spec model of the Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``), v2.0 to v2.3.

The releases renamed the pod overrides: ``podSpecOverrides`` (v2.0), ``podTemplateOverrides`` (v2.1), then
``runtimePatches`` (v2.2+, which also drop ``labels``/``annotations`` and add ``activeDeadlineSeconds``). A
manifest is written for one release: the model accepts each release's fields and refuses a mix of two
(the API server of either release would prune the other's fields silently). ``trainer.numProcPerNode`` is a
number, or a string (``auto``, ``cpu``, ``gpu``) before v2.2. Pod overrides and patches are passed through
as written; the installed CRD checks them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from airflow_provider_training.kinds.trainer import GROUP, KIND, REPLICA_TYPES, VERSION
from airflow_provider_training.specs.common import JobModel, Replica, SpecModel, name_errors, to_plain
from airflow_provider_training.specs.errors import FieldErrors

Plain = Annotated[dict[str, Any], BeforeValidator(to_plain)]
"""A core/v1 object (EnvVar, ResourceRequirements, ...) as a dict or a kubernetes client model."""

RuntimeKind = Literal["TrainingRuntime", "ClusterTrainingRuntime"]

# Fields only some releases have, by the release that has them (a manifest may use one release's).
RELEASE_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("v2.0", ("podSpecOverrides",)),
    ("v2.1", ("podTemplateOverrides",)),
    ("v2.2+", ("runtimePatches", "activeDeadlineSeconds")),
)
PRE_V22_FIELDS = ("labels", "annotations")  # v2.0 and v2.1 only


class RuntimeRef(SpecModel):
    """The runtime the TrainJob runs on; the Trainer controller fails a TrainJob whose runtime is missing."""

    name: str = Field(min_length=1)
    api_group: Literal["trainer.kubeflow.org"] = Field("trainer.kubeflow.org", alias="apiGroup")
    kind: RuntimeKind = "ClusterTrainingRuntime"


class SecretRef(SpecModel):
    name: str = Field(min_length=1)


class StorageInitializer(SpecModel):
    storage_uri: str | None = Field(None, alias="storageUri")
    env: list[Plain] | None = None
    secret_ref: SecretRef | None = Field(None, alias="secretRef")


class Initializer(SpecModel):
    dataset: StorageInitializer | None = None
    model: StorageInitializer | None = None


class Trainer(SpecModel):
    """The runtime's trainer node, overridden: every field is optional (the runtime's value stays)."""

    image: str | None = Field(None, min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[Plain] | None = None
    num_nodes: int | None = Field(None, alias="numNodes", ge=1)
    resources_per_node: Plain | None = Field(None, alias="resourcesPerNode")
    num_proc_per_node: Annotated[int, Field(ge=1)] | Literal["auto", "cpu", "gpu"] | None = Field(
        None, alias="numProcPerNode"
    )


class TrainJobSpec(SpecModel):
    runtime_ref: RuntimeRef = Field(alias="runtimeRef")
    initializer: Initializer | None = None
    trainer: Trainer | None = None
    suspend: bool | None = None
    managed_by: Literal["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"] | None = (
        Field(None, alias="managedBy")
    )
    active_deadline_seconds: int | None = Field(None, alias="activeDeadlineSeconds", ge=1)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    pod_spec_overrides: list[Plain] | None = Field(None, alias="podSpecOverrides")
    pod_template_overrides: list[Plain] | None = Field(None, alias="podTemplateOverrides")
    runtime_patches: list[Plain] | None = Field(None, alias="runtimePatches")


class TrainJob(JobModel):
    """A TrainJob: a runtime reference plus overrides of its trainer and initializers."""

    API_VERSION: ClassVar[str] = f"{GROUP}/{VERSION}"
    KIND: ClassVar[str] = KIND
    spec: TrainJobSpec

    def replicas(self) -> list[Replica]:
        """The replicated jobs the runtimes may define, for the name limit: the JobSet's Job of the longest
        (``<name>-dataset-initializer-0``) must stay within 63 characters."""
        return [
            Replica(path="spec.runtimeRef", type=type_, replicas=1, template={}) for type_ in REPLICA_TYPES
        ]

    def errors(self) -> FieldErrors:
        """The type meta, the name, and one release's fields; no replica specs or containers to check (the
        runtime holds them)."""
        errors: FieldErrors = []
        if (self.api_version, self.kind) != (self.API_VERSION, self.KIND):
            errors.append(
                ("apiVersion", f"must be {self.API_VERSION} for {self.KIND} (got {self.api_version})")
            )
        return errors + name_errors(self.metadata.name, self.replicas()) + self.release_errors()

    def release_errors(self) -> FieldErrors:
        """Fields of two releases in one manifest: the installed CRD has one release's names."""
        written = set(self.spec.model_dump(by_alias=True, exclude_none=True))
        used = [(release, sorted(written & set(fields))) for release, fields in RELEASE_FIELDS]
        used = [(release, fields) for release, fields in used if fields]
        errors: FieldErrors = []
        if len(used) > 1:
            found = "; ".join(f"{release}: {', '.join(fields)}" for release, fields in used)
            errors.append(
                ("spec", f"mixes fields of different Trainer releases ({found}): write one release's")
            )
        if any(release == "v2.2+" for release, _ in used):
            errors += [
                (f"spec.{field}", "not in Trainer v2.2+ (which has runtimePatches): use runtimePatches")
                for field in PRE_V22_FIELDS
                if field in written
            ]
        return errors


MODELS: tuple[type[JobModel], ...] = (TrainJob,)

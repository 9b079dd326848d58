"""Pydantic pieces every training-job spec shares, and the checks every kind runs.

A kind's model subclasses :class:`JobModel` and says where its replicas are (:meth:`JobModel.replicas`, for
map-shaped ``<x>ReplicaSpecs`` as well as list-shaped ``replicaSpecs``) and which operator rules it adds
(:meth:`JobModel.rule_errors`). Replica types, containers and the job name are then checked here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from airflow_provider_training.kinds import JobKind, get_kind
from airflow_provider_training.naming import MAX_NAME as MAX_NAME_LENGTH
from airflow_provider_training.naming import name_problem
from airflow_provider_training.specs.errors import FieldErrors


@cache
def _api_client() -> Any:
    from kubernetes.client import ApiClient  # only when a client model is actually passed in

    return ApiClient()


def to_plain(value: Any) -> Any:
    """JSON-ready data: kubernetes client models (``V1PodTemplateSpec``, ...) become dicts, tuples lists."""
    if hasattr(value, "openapi_types") and hasattr(value, "attribute_map"):
        return _api_client().sanitize_for_serialization(value)
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    return value


PodTemplate = Annotated[dict[str, Any], BeforeValidator(to_plain)]
"""A core/v1 PodTemplateSpec, as a dict or a ``kubernetes.client.V1PodTemplateSpec``; passed through as is."""

RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None"]


class SpecModel(BaseModel):
    """JSON keys by alias, Python names accepted too, unknown keys refused, no silent type coercion."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", strict=True)


class ObjectMeta(SpecModel):
    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ReplicaSpec(SpecModel):
    """``replicas`` pods from ``template``; ``restartPolicy`` overrides the template's own."""

    replicas: int | None = Field(None, ge=0)
    template: PodTemplate = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = Field(None, alias="restartPolicy")


class SchedulingPolicy(SpecModel):
    """Gang scheduling (volcano / scheduler-plugins)."""

    min_available: int | None = Field(None, alias="minAvailable")
    queue: str | None = None
    min_resources: dict[str, Any] | None = Field(None, alias="minResources")
    priority_class: str | None = Field(None, alias="priorityClass")
    schedule_timeout_seconds: int | None = Field(None, alias="scheduleTimeoutSeconds")


class RunPolicy(SpecModel):
    clean_pod_policy: CleanPodPolicy | None = Field(None, alias="cleanPodPolicy")
    ttl_seconds_after_finished: int | None = Field(None, alias="ttlSecondsAfterFinished", ge=0)
    active_deadline_seconds: int | None = Field(None, alias="activeDeadlineSeconds", ge=0)
    backoff_limit: int | None = Field(None, alias="backoffLimit", ge=0)
    scheduling_policy: SchedulingPolicy | None = Field(None, alias="schedulingPolicy")
    suspend: bool | None = None
    managed_by: Literal["kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"] | None = Field(
        None, alias="managedBy"
    )


@dataclass(frozen=True)
class Replica:
    """One replica type of a job, wherever its spec sits: its count as written and the operator's default."""

    path: str  # "spec.pytorchReplicaSpecs.Master" or "spec.replicaSpecs[0]"
    type: str
    replicas: int | None  # as written; None when unset
    template: Mapping[str, Any]
    default: int = 1  # what the operator uses when ``replicas`` is unset
    indexed: bool = True  # pod names end in "-<index>" (the MPIJob v1 launcher's does not)

    @property
    def count(self) -> int:
        return self.default if self.replicas is None else self.replicas

    @property
    def longest_pod_suffix(self) -> str:
        suffix = f"-{self.type.lower()}"
        return f"{suffix}-{max(self.count - 1, 0)}" if self.indexed else suffix


class JobModel(SpecModel):
    """A whole manifest of one kind. Subclasses set ``API_VERSION``, ``KIND`` and the ``spec`` type."""

    API_VERSION: ClassVar[str]
    KIND: ClassVar[str]

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=lambda: ObjectMeta.model_validate({}))
    spec: Any
    status: dict[str, Any] | None = Field(None, exclude=True)  # accepted from a fetched object, never sent

    @model_validator(mode="before")
    @classmethod
    def _default_type_meta(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {"apiVersion": cls.API_VERSION, "kind": cls.KIND, **data}
        return data

    @classmethod
    def job_kind(cls) -> JobKind:
        return get_kind(cls.KIND, cls.API_VERSION)

    def replicas(self) -> list[Replica]:
        """Every replica type of this job; kinds whose spec holds replicas override this."""
        return []

    @classmethod
    def pack_replica_specs(cls, by_type: dict[str, dict[str, Any]]) -> Any:
        """The value of the spec's replica key for builders: a map by type here; list-shaped APIs
        (``replicaSpecs: [{type: ..., ...}]``) override this."""
        return by_type

    def rule_errors(self) -> FieldErrors:
        """The kind's own operator rules (webhook validation); the generic checks run anyway."""
        return []

    def errors(self) -> FieldErrors:
        """Everything the API or the operator would refuse, beyond the field types pydantic checked."""
        replicas = self.replicas()
        errors: FieldErrors = []
        if (self.api_version, self.kind) != (self.API_VERSION, self.KIND):
            errors.append(
                ("apiVersion", f"must be {self.API_VERSION} for {self.KIND} (got {self.api_version})")
            )
        errors += name_errors(self.metadata.name, replicas)
        errors += replica_type_errors(replicas, self.allowed_replica_types())
        for replica in replicas:
            errors += container_errors(replica, self.default_container_required(replica))
        return errors + self.rule_errors()

    def allowed_replica_types(self) -> tuple[str, ...] | None:
        """The replica types the operator accepts; ``None`` for APIs whose types are free names."""
        return self.job_kind().replica_types

    def default_container_required(self, replica: Replica) -> str | None:
        """The container name the operator needs in this replica's pods (``None``: any name will do)."""
        return self.job_kind().default_container

    def name_limit(self) -> int:
        """How long ``metadata.name`` may be so that every pod (and service) name stays within 63."""
        suffixes = [replica.longest_pod_suffix for replica in self.replicas()]
        return MAX_NAME_LENGTH - max(map(len, suffixes), default=0)

    def manifest(self) -> dict[str, Any]:
        """The JSON body to send: JSON keys, nothing unset."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def name_errors(name: str | None, replicas: Iterable[Replica]) -> FieldErrors:
    """``metadata.name`` must be a DNS-1035 label short enough for ``<name>-<type>-<index>`` pod names
    (:func:`~airflow_provider_training.naming.name_problem`, the one job-name check)."""
    if name is None:
        return []
    longest = max((replica.longest_pod_suffix for replica in replicas), key=len, default="")
    problem = name_problem(name, MAX_NAME_LENGTH - len(longest), longest)
    return [("metadata.name", problem)] if problem else []


def replica_type_errors(replicas: list[Replica], allowed: Iterable[str] | None) -> FieldErrors:
    """Unknown replica types (any name is fine when ``allowed`` is ``None``), and at least one replica."""
    if allowed is None:
        return [] if replicas else [("spec", "must define at least one replica")]
    allowed = tuple(allowed)
    errors = [
        (replica.path, f"unknown replica type {replica.type!r}; allowed: {', '.join(allowed)}")
        for replica in replicas
        if replica.type not in allowed
    ]
    if not replicas:
        errors.append(
            ("spec", f"must define at least one replica; allowed replica types: {', '.join(allowed)}")
        )
    return errors


def container_errors(replica: Replica, default_container: str | None) -> FieldErrors:
    """Every container needs a name and an image; one must carry the kind's default container name."""
    path = f"{replica.path}.template.spec.containers"
    containers = (replica.template.get("spec") or {}).get("containers")
    named = f", one of them named {default_container!r}" if default_container else ""
    if not isinstance(containers, list) or not containers:
        return [(path, f"must list at least one container{named}")]
    errors: FieldErrors = []
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping):
            errors.append((f"{path}[{index}]", "must be a mapping"))
            continue
        errors += [
            (f"{path}[{index}].{key}", "required") for key in ("name", "image") if not container.get(key)
        ]
    names = [container.get("name") for container in containers if isinstance(container, Mapping)]
    if default_container and default_container not in names:
        errors.append(
            (
                path,
                f"must include a container named {default_container!r}, the operator's default container "
                f"(got {', '.join(map(repr, names))})",
            )
        )
    return errors


def count_errors(
    replica: Replica, *, exactly: int | None = None, at_least: int | None = None, unset_ok: bool = True
) -> FieldErrors:
    """An error on ``<replica>.replicas`` when it breaks an operator rule.

    ``unset_ok=False`` for rules the webhook checks before any defaulting (a PyTorch Master needs
    ``replicas: 1`` written out).
    """
    path, got = f"{replica.path}.replicas", replica.replicas
    if got is None:
        if unset_ok:
            return []
        return [
            (path, f"must be exactly {exactly} for {replica.type} (got none; the operator requires it set)")
        ]
    if exactly is not None and got != exactly:
        return [(path, f"must be exactly {exactly} for {replica.type} (got {got})")]
    if at_least is not None and got < at_least:
        return [(path, f"must be at least {at_least} for {replica.type} (got {got})")]
    return []

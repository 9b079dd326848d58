"""The resource types localkube serves: built-in Kubernetes kinds and every training-job custom resource."""

from __future__ import annotations

from dataclasses import dataclass

STATUS_ONLY: frozenset[str] = frozenset({"status"})


@dataclass(frozen=True)
class ResourceType:
    """One served resource, as discovery describes it (`/apis/{group}/{version}`)."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool = True
    subresources: frozenset[str] = STATUS_ONLY
    builtin: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The qualified resource name the real server uses in messages: `pods`, `jobs.batch`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Pod`, `Job.batch`, `PyTorchJob.kubeflow.org`: how 422 messages name the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    "pod",
    subresources=frozenset({"status", "log", "binding"}),
    builtin=True,
    short_names=("po",),
)
SERVICES = ResourceType("", "v1", "services", "Service", "service", builtin=True, short_names=("svc",))
EVENTS = ResourceType(
    "", "v1", "events", "Event", "event", subresources=frozenset(), builtin=True, short_names=("ev",)
)
CONFIGMAPS = ResourceType(
    "",
    "v1",
    "configmaps",
    "ConfigMap",
    "configmap",
    subresources=frozenset(),
    builtin=True,
    short_names=("cm",),
)
BATCH_JOBS = ResourceType("batch", "v1", "jobs", "Job", "job", builtin=True)
REPLICASETS = ResourceType(
    "apps", "v1", "replicasets", "ReplicaSet", "replicaset", builtin=True, short_names=("rs",)
)

SECRETS = ResourceType("", "v1", "secrets", "Secret", "secret", subresources=frozenset(), builtin=True)
SERVICE_ACCOUNTS = ResourceType(
    "",
    "v1",
    "serviceaccounts",
    "ServiceAccount",
    "serviceaccount",
    subresources=frozenset(),
    builtin=True,
    short_names=("sa",),
)
NAMESPACES = ResourceType(
    "", "v1", "namespaces", "Namespace", "namespace", namespaced=False, builtin=True, short_names=("ns",)
)
# What a kubelet registers (an agent, `localkube agent`): its addresses and kubelet endpoint, where the server
# proxies pod logs to.
NODES = ResourceType("", "v1", "nodes", "Node", "node", namespaced=False, builtin=True, short_names=("no",))
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = ResourceType(RBAC_GROUP, "v1", "roles", "Role", "role", subresources=frozenset(), builtin=True)
ROLE_BINDINGS = ResourceType(
    RBAC_GROUP, "v1", "rolebindings", "RoleBinding", "rolebinding", subresources=frozenset(), builtin=True
)

# The built-in kinds whose metadata.generation kube-apiserver keeps (custom resources all have one).
WITH_GENERATION: frozenset[ResourceType] = frozenset({PODS, BATCH_JOBS, REPLICASETS})
# The kinds kube-apiserver answers a delete with the object (gone or not); others get a `Success` Status
# when the object is gone at once.
RETURN_DELETED: frozenset[ResourceType] = frozenset({PODS, SERVICES, SERVICE_ACCOUNTS, NAMESPACES})
# The REST API's default propagationPolicy where it is not Background (batch/v1 Jobs keep their pods).
DEFAULT_PROPAGATION: dict[ResourceType, str] = {BATCH_JOBS: "Orphan"}


def has_generation(rt: ResourceType) -> bool:
    return not rt.builtin or rt in WITH_GENERATION


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    PODS,
    SERVICES,
    EVENTS,
    CONFIGMAPS,
    SECRETS,
    SERVICE_ACCOUNTS,
    NAMESPACES,
    NODES,
    BATCH_JOBS,
    REPLICASETS,
    ROLES,
    ROLE_BINDINGS,
)


def _custom(
    group: str,
    version: str,
    kind: str,
    plural: str | None = None,
    *,
    status: bool = True,
    short: tuple[str, ...] = (),
) -> ResourceType:
    plural = plural or kind.lower() + "s"
    return ResourceType(
        group,
        version,
        plural,
        kind,
        kind.lower(),
        subresources=STATUS_ONLY if status else frozenset(),
        short_names=short,
    )


# Kubeflow Training Operator v1 (every CRD has the status subresource).
KUBEFLOW_V1: tuple[ResourceType, ...] = tuple(
    _custom("kubeflow.org", "v1", kind)
    for kind in ("TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "PaddleJob", "MPIJob", "JAXJob")
)
# Legacy operators predate the status subresource: they write status with a PUT of the whole object.
LEGACY: tuple[ResourceType, ...] = (
    _custom("paddlepaddle.org", "v1", "TrainingJob", status=False, short=("tj",)),
    _custom("kubeflow.org", "v1alpha1", "MXJob", status=False),
    _custom("mxnet.mlkube.io", "v1beta1", "MxJob", status=False),
)
TENSORSTACK: tuple[ResourceType, ...] = tuple(
    _custom("batch.tensorstack.dev", "v1beta1", kind, short=(short,))
    for kind, short in (
        ("TensorFlowTrainingJob", "tj"),
        ("PyTorchTrainingJob", "pj"),
        ("XGBoostTrainingJob", "xj"),
        ("DeepSpeedJob", "dj"),
        ("ColossalAIJob", "caij"),
        ("MPIJob", "mj"),
        ("GenericJob", "gj"),
        ("BeamJob", "bj"),
    )
)
CUSTOM_TYPES: tuple[ResourceType, ...] = KUBEFLOW_V1 + LEGACY + TENSORSTACK


def default_resource_types() -> list[ResourceType]:
    """Built-ins plus every custom kind of every API family the provider supports."""
    return [*BUILTIN_TYPES, *CUSTOM_TYPES]


# -- discovery documents -----------------------------------------------------------------------------------
VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-localkube",
    "gitCommit": "localkube",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "log": ["get"], "binding": ["create"]}
_SUBRESOURCE_KINDS = {"binding": "Binding"}


def verbs_of(rt: ResourceType) -> list[str]:
    """What discovery lists for `rt` (kube-apiserver deletes namespaces one at a time only)."""
    return [v for v in VERBS if v != "deletecollection"] if rt == NAMESPACES else VERBS


def api_versions(server_address: str) -> dict:
    """`/api`: the core group's APIVersions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _versions_by_group(types: list[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    return groups


def _api_group(name: str, versions: list[str]) -> dict:
    stable = sorted(versions, key=lambda v: (v != "v1", v))  # v1 is preferred where served
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in stable]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(types: list[ResourceType]) -> dict:
    """`/apis`: APIGroupList of every named group served."""
    groups = [_api_group(name, versions) for name, versions in sorted(_versions_by_group(types).items())]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(types: list[ResourceType], name: str) -> dict | None:
    """`/apis/{group}`: one APIGroup, or None if not served."""
    versions = _versions_by_group(types).get(name)
    return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(name, versions)} if versions else None


def resource_list(types: list[ResourceType], group_name: str, version: str) -> dict | None:
    """`/api/v1` or `/apis/{group}/{version}`: APIResourceList with subresources (`pods/log`), or None."""
    resources: list[dict] = []
    for rt in sorted(
        (t for t in types if (t.group, t.version) == (group_name, version)), key=lambda t: t.plural
    ):
        entry = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs_of(rt),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        resources.extend(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": _SUBRESOURCE_KINDS.get(sub, rt.kind),
                "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
            }
            for sub in sorted(rt.subresources)
        )
    if not resources:
        return None
    group_version = f"{group_name}/{version}" if group_name else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }

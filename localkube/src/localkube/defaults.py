"""What the API server does to a built-in object on every write: defaulting and conversion.

The real server decodes each write into its internal types, which fills in defaults (a pod's `restartPolicy`,
a container's `imagePullPolicy`, a ReplicaSet's `spec.replicas`), turns a Secret's write-only `stringData`
into `data`, and serializes fields that are never omitted (a ReplicaSet's `status.replicas: 0`). Create also
runs the admission plugins and strategies that fill in a pod's service account and priority, its first status
with the QoS class, and a Job's generated selector. Clients deserialize what comes back into typed models that
insist on some of these fields, so localkube does the same. Custom resources are left alone (their schema
defaults belong to the schema validator).

Nothing is validated beyond what a conversion needs, except that a pod without containers, or a ReplicaSet
or Job whose pod template has none, is refused (`require_containers`, 422 `spec.containers: Required
value`): a pod runtime cannot run a pod without. The store applies it to every create and update, also to
objects controllers write directly, as the real server refuses a controller's API request. A Job whose pod
template's `restartPolicy` is not `OnFailure` or `Never` (it is not defaulted) is refused only when created
through the API (`admit_create`), as kube-apiserver refuses it: tests that put Jobs into the store directly
may leave it out.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from localkube.copying import clone
from localkube.errors import ApiError
from localkube.resources import RBAC_GROUP, ResourceType

MAX_INT32 = 2**31 - 1
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
_COMPUTE = ("cpu", "memory")  # the resources the QoS class looks at
_SUFFIXES: dict[str, Decimal] = {
    "m": Decimal("0.001"),
    "": Decimal(1),
    **{s: Decimal(10) ** (3 * i) for i, s in enumerate("kMGTPE", start=1)},
    **{f"{s}i": Decimal(2) ** (10 * i) for i, s in enumerate("KMGTPE", start=1)},
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))([eE][+-]?[0-9]+|[a-zA-Z]*)$")


def apply_on_write(rt: ResourceType, obj: dict, *, creating: bool) -> dict:
    """`obj` (a whole object about to be stored) defaulted and converted, as a copy when anything applies;
    ApiError 400 if it cannot be decoded (a Secret's `data` value that is not base64)."""
    writer = _WRITERS.get(rt.key) if rt.builtin else None
    if writer is None:
        return obj
    obj = clone(obj)
    writer(obj, creating)
    return obj


_CONTAINERS_AT = {
    "pods": ("spec",),
    "replicasets.apps": ("spec", "template", "spec"),
    "jobs.batch": ("spec", "template", "spec"),
}


# The keys kube-apiserver requires in a Secret of each type (in `data` or `stringData`).
_SECRET_KEYS = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}


def admit_create(rt: ResourceType, obj: dict) -> None:
    """422 Invalid for what kube-apiserver refuses on an API create, all causes together: what
    `require_containers` refuses, a Job whose pods would restart `Always` (unset, as it is not defaulted,
    or set so), a Secret of a type without the keys the type needs."""
    causes = [cause for cause in (_containers_cause(rt, obj),) if cause]
    if rt.key == "jobs.batch":
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        if spec.get("restartPolicy") not in ("OnFailure", "Never"):
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "message": 'Required value: valid values: "OnFailure", "Never"',
                    "field": "spec.template.spec.restartPolicy",
                }
            )
    if rt.key == "secrets":
        present = {*(obj.get("data") or {}), *(obj.get("stringData") or {})}
        causes += [
            {"reason": "FieldValueRequired", "message": "Required value", "field": f"data[{key}]"}
            for key in _SECRET_KEYS.get(str(obj.get("type")), ())
            if key not in present
        ]
    if causes:
        raise ApiError.invalid(rt, str((obj.get("metadata") or {}).get("name") or ""), causes)


def require_containers(rt: ResourceType, obj: dict) -> None:
    """422 Invalid for a pod (or a workload's pod template) without containers, as the real server answers."""
    cause = _containers_cause(rt, obj)
    if cause:
        raise ApiError.invalid(rt, str((obj.get("metadata") or {}).get("name") or ""), [cause])


def _containers_cause(rt: ResourceType, obj: dict) -> dict | None:
    path = _CONTAINERS_AT.get(rt.key) if rt.builtin else None
    if path is None:
        return None
    spec: Any = obj
    for key in path:
        spec = spec.get(key) if isinstance(spec, dict) else None
    if isinstance(spec, dict) and spec.get("containers"):
        return None
    return {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": ".".join((*path, "containers")),
    }


def _default(mapping: dict, key: str, value: Any) -> None:
    """Set `key` unless it has a value (an explicit null counts as unset, as in Go)."""
    if mapping.get(key) is None:
        mapping[key] = value


def _dict_at(mapping: dict, key: str) -> dict:
    """mapping[key], made an empty dict when missing or null."""
    if not isinstance(mapping.get(key), dict):
        mapping[key] = {}
    return mapping[key]


# -- pods ----------------------------------------------------------------------------------------------------
def image_pull_policy(image: str) -> str:
    """`Always` for a `:latest` or untagged image without a digest, else `IfNotPresent`."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]  # a registry's port (`host:5000/img`) is not a tag
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag and not digest:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_container(container: dict) -> None:
    _default(container, "terminationMessagePath", "/dev/termination-log")
    _default(container, "terminationMessagePolicy", "File")
    _default(container, "imagePullPolicy", image_pull_policy(str(container.get("image") or "")))
    resources = _dict_at(container, "resources")
    limits = resources.get("limits") or {}
    if limits:  # a limit without a request requests the limit
        requests = _dict_at(resources, "requests")
        for name, value in limits.items():
            _default(requests, name, value)
    for port in container.get("ports") or []:
        _default(port, "protocol", "TCP")
    for var in container.get("env") or []:
        field_ref = (var.get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            _default(field_ref, "apiVersion", "v1")


def default_pod_spec(spec: dict, *, restart_policy: bool = True) -> None:
    """The defaults of a PodSpec, in a pod or a template."""
    if restart_policy:
        _default(spec, "restartPolicy", "Always")
    _default(spec, "terminationGracePeriodSeconds", 30)
    _default(spec, "dnsPolicy", "ClusterFirst")
    _default(spec, "schedulerName", "default-scheduler")
    _default(spec, "securityContext", {})
    _default(spec, "enableServiceLinks", True)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)


def _quantity(value: Any) -> Decimal | None:
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    number, suffix = match.groups()
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * Decimal(10) ** int(suffix[1:])
        return Decimal(number) * _SUFFIXES[suffix] if suffix in _SUFFIXES else None
    except InvalidOperation:
        return None


def qos_class(spec: dict) -> str:
    """`Guaranteed`, `Burstable` or `BestEffort`, from the containers' cpu/memory requests and limits."""
    totals: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    guaranteed = True
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = (container or {}).get("resources") or {}
        for kind, total in totals.items():
            found = set()
            for name, value in (resources.get(kind) or {}).items():
                amount = _quantity(value)
                if name in _COMPUTE and amount is not None and amount > 0:
                    total[name] = total.get(name, Decimal(0)) + amount
                    found.add(name)
            if kind == "limits" and found != set(_COMPUTE):
                guaranteed = False
    requests, limits = totals["requests"], totals["limits"]
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def _pod(obj: dict, creating: bool) -> None:
    spec = _dict_at(obj, "spec")
    default_pod_spec(spec)
    if not creating:
        return
    # admission: the service account and the priority
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    _default(spec, "priority", 0)
    _default(spec, "preemptionPolicy", "PreemptLowerPriority")
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


# -- workloads -----------------------------------------------------------------------------------------------
def _template_spec(spec: dict, *, restart_policy: bool) -> None:
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"], restart_policy=restart_policy)


def _replica_set(obj: dict, creating: bool) -> None:
    spec = _dict_at(obj, "spec")
    _default(spec, "replicas", 1)
    _template_spec(spec, restart_policy=True)
    _default(_dict_at(obj, "status"), "replicas", 0)  # never omitted when serialized


def _job(obj: dict, creating: bool) -> None:
    spec = _dict_at(obj, "spec")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1  # a non-parallel Job; a Job with only parallelism is a work queue
    _default(spec, "parallelism", 1)
    _default(spec, "backoffLimit", MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6)
    _default(spec, "completionMode", "NonIndexed")
    _default(spec, "suspend", False)
    _default(
        spec, "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    meta = _dict_at(obj, "metadata")
    _template_spec(spec, restart_policy=False)
    if creating and spec.get("manualSelector") is not True:
        uid, name = meta["uid"], meta["name"]
        labels = _dict_at(_dict_at(_dict_at(spec, "template"), "metadata"), "labels")
        labels.update({JOB_UID_LABEL: uid, JOB_NAME_LABEL: name, "controller-uid": uid, "job-name": name})
        spec["selector"] = {"matchLabels": {JOB_UID_LABEL: uid}}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if template_labels and not meta.get("labels"):  # the generated ones too, as kube-apiserver copies them
        meta["labels"] = clone(template_labels)


# -- core objects --------------------------------------------------------------------------------------------
def _secret(obj: dict, creating: bool) -> None:
    """`stringData` is write-only: merged into `data` (base64), taking precedence, and dropped."""
    _default(obj, "type", "Opaque")
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise _undecodable_secret("data must be an object")
    for key, value in data.items():
        try:
            if not isinstance(value, str):
                raise TypeError
            base64.b64decode(value, validate=True)
        except (TypeError, binascii.Error):
            raise _undecodable_secret(f"illegal base64 data in data[{key!r}]") from None
    string_data = obj.pop("stringData", None) or {}
    if not isinstance(string_data, dict):
        raise _undecodable_secret("stringData must be an object")
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if data:
        obj["data"] = data
    else:
        obj.pop("data", None)


def _undecodable_secret(why: str) -> ApiError:
    # never quote a value: it would end up in clients' error messages and logs
    return ApiError.bad_request(f'Secret in version "v1" cannot be handled as a Secret: {why}')


def _namespace(obj: dict, creating: bool) -> None:
    meta = _dict_at(obj, "metadata")
    _dict_at(meta, "labels")["kubernetes.io/metadata.name"] = meta.get("name")
    _default(_dict_at(obj, "spec"), "finalizers", ["kubernetes"])
    _default(_dict_at(obj, "status"), "phase", "Active")


def _role_binding(obj: dict, creating: bool) -> None:
    for subject in obj.get("subjects") or []:
        if (
            isinstance(subject, dict)
            and not subject.get("apiGroup")
            and subject.get("kind") != "ServiceAccount"
        ):
            subject["apiGroup"] = RBAC_GROUP


_WRITERS: dict[str, Callable[[dict, bool], None]] = {
    "pods": _pod,
    "replicasets.apps": _replica_set,
    "jobs.batch": _job,
    "secrets": _secret,
    "namespaces": _namespace,
    "rolebindings.rbac.authorization.k8s.io": _role_binding,
}

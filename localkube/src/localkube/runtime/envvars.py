"""A container's environment as the kubelet builds it: `envFrom`, `env`/`valueFrom`, `$(VAR)` expansion."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from localkube.resources import CONFIGMAPS, ResourceType
from localkube.runtime.kubelet import NODE_NAME, ContainerConfigError
from localkube.runtime.podstate import HOST_IP, POD_IP
from localkube.store import ApiError

if TYPE_CHECKING:
    from localkube.api import ClusterApi

_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_LABEL_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` is `$`, the rest stays."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)


def resolve_env(store: ClusterApi, pod: dict, container: dict) -> dict[str, str]:
    """The variables of `container`, in order, with references resolved against the store."""
    namespace = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        for kind in ("configMapRef", "secretRef"):
            ref = source.get(kind)
            if ref:
                data = _source_data(store, namespace, kind, ref["name"], optional=bool(ref.get("optional")))
                env.update({prefix + key: value for key, value in data.items()})
    for var in container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = expand(str(var.get("value", "")), env)
            continue
        value = _value_from(store, pod, container, source)
        if value is not None:
            env[var["name"]] = value
    return env


def _value_from(store: ClusterApi, pod: dict, container: dict, source: dict) -> str | None:
    namespace = pod["metadata"].get("namespace", "default")
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        ref = source["resourceFieldRef"]
        kind, _, name = ref["resource"].partition(".")
        return str(((container.get("resources") or {}).get(kind) or {}).get(name, "0"))
    for kind in ("configMapKeyRef", "secretKeyRef"):
        ref = source.get(kind)
        if ref:
            optional = bool(ref.get("optional"))
            data = _source_data(store, namespace, kind, ref["name"], optional=optional)
            if ref["key"] in data:
                return data[ref["key"]]
            if optional:
                return None
            what = "configmap" if kind.startswith("configMap") else "secret"
            raise ContainerConfigError(
                f"couldn't find key {ref['key']} in {what.capitalize()} {namespace}/{ref['name']}"
            )
    return None


def field_value(pod: dict, path: str) -> str:
    """The downward API: a pod field by its `fieldPath`."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName") or NODE_NAME,
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_FIELD.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldPath {path!r}")


def _secrets_type(store: ClusterApi) -> ResourceType | None:
    try:
        return store.resource_type("", "v1", "secrets")
    except ApiError:
        return None


def _source_data(
    store: ClusterApi, namespace: str, kind: str, name: str, *, optional: bool
) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's decoded data; {} when optional and missing."""
    is_config_map = kind.startswith("configMap")
    rt = CONFIGMAPS if is_config_map else _secrets_type(store)
    what = "configmap" if is_config_map else "secret"
    try:
        if rt is None:
            raise ApiError(404, "NotFound", "secrets are not served")
        obj = store.get(rt, namespace, name)
    except ApiError as exc:
        if exc.code == 404 and optional:
            return {}
        if exc.code == 404:
            raise ContainerConfigError(f'{what} "{name}" not found') from exc
        raise
    if is_config_map:
        return {k: str(v) for k, v in (obj.get("data") or {}).items()}
    decoded = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
    return {**decoded, **{k: str(v) for k, v in (obj.get("stringData") or {}).items()}}

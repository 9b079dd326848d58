"""The Kubernetes API's paths of resources, its query values, and what a request asks as RBAC names it:
pure, no I/O (the transport sends, errors name the request)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from airflow_provider_training.kinds.base import ResourceRef

Query = Iterable[tuple[str, str]]


def collection_path(resource: ResourceRef, namespace: str | None) -> str:
    """``/api/v1/namespaces/ns/pods`` or ``/apis/group/version/namespaces/ns/plural``."""
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    return f"{base}/{resource.plural}"


def object_path(
    resource: ResourceRef, namespace: str | None, name: str, subresource: str | None = None
) -> str:
    path = f"{collection_path(resource, namespace)}/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def describe_request(method: str, path: str, query: Query | None = None) -> ApiRequest:
    """What a request asks, as RBAC names it: ``list pods in namespace default``, ``get pods/log
    default/x-master-0``, ``watch pytorchjobs.kubeflow.org in namespace default``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] not in (["api"], ["apis"]):  # /version, /healthz: not a resource
        return ApiRequest(method, path=path)
    group, rest = ("", parts[2:]) if parts[:1] == ["api"] else ("".join(parts[1:2]), parts[3:])
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return ApiRequest(method, path=path)
    resource = f"{rest[0]}.{group}" if group else rest[0]
    if len(rest) > 2:
        resource += f"/{rest[2]}"
    if len(rest) > 1:
        return ApiRequest(_VERBS.get(method, "get"), resource, namespace, rest[1], path)
    watching = any(k == "watch" and v in ("true", "1") for k, v in query or ())
    verb = "watch" if watching else ("list" if method == "GET" else _VERBS.get(method, method.lower()))
    return ApiRequest(verb, resource, namespace, path=path)


def encode_query(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as the API expects them: booleans lower-case, ``None`` dropped."""
    out = []
    for key, value in params.items():
        if value is None:
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def format_since_time(value: datetime | None) -> str | None:
    """RFC 3339 in UTC at second resolution, as the API takes ``sinceTime``."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ApiRequest:
    """What a request asked, as RBAC names it: ``verb`` on ``resource`` (``pods``, ``pods/log``,
    ``pytorchjobs.kubeflow.org``: plural, subresource, API group), in ``namespace``, of object ``name``.
    A request that is not for a resource has only ``verb`` (the HTTP method) and ``path``."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def __str__(self) -> str:
        """``list pods in namespace default``, ``get pods/log default/x-master-0``."""
        if not self.resource:
            return f"{self.verb} {self.path}"
        if self.name:
            return f"{self.verb} {self.resource} {self.namespace + '/' if self.namespace else ''}{self.name}"
        return f"{self.verb} {self.resource}" + (f" in namespace {self.namespace}" if self.namespace else "")

    def permission(self) -> str:
        """The permission it needs: `list` on `pods` in namespace ml, `get` on `pods/log` named p in ..."""
        text = f"`{self.verb}` on `{self.resource}`" + (f" named {self.name}" if self.name else "")
        return text + (f" in namespace {self.namespace}" if self.namespace else "")


def group_version_plural(request: ApiRequest | None) -> tuple[str, str, str] | None:
    """``(group, version, plural)`` of a request to a named group's resource (``/apis/...``), or ``None``."""
    parts = [p for p in (request.path if request else "").split("/") if p]
    if parts[:1] != ["apis"] or len(parts) < 4:
        return None
    rest = parts[5:] if parts[3] == "namespaces" else parts[3:]
    return (parts[1], parts[2], rest[0]) if rest else None

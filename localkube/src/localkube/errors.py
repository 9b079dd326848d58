"""`kind: Status` errors as the real API server words them, and its object-name rules."""

from __future__ import annotations

import json
import re
from typing import Any

from localkube.resources import ResourceType

_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


class ApiError(Exception):
    """An error the API answers with a `kind: Status` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details or {}
        self.empty_details = details == {}  # sent as `details: {}` (as some real answers have), not omitted
        self.headers = headers or {}

    def status_body(self) -> dict:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details or self.empty_details:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, rt: ResourceType, name: str) -> ApiError:
        details = {"name": name, "group": rt.group, "kind": rt.plural}
        if not rt.group:  # the real server omits an empty group (core kinds): {name, kind}
            del details["group"]
        return cls(404, "NotFound", f'{rt.key} "{name}" not found', details)

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def invalid(cls, rt: ResourceType, name: str, causes: list[dict]) -> ApiError:
        """422 Invalid; causes are `{reason, message, field}` with message `Invalid value: ...: why`."""
        errors = [f"{cause['field']}: {cause['message']}" for cause in causes]
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return cls(
            422,
            "Invalid",
            f'{rt.qualified_kind} "{name}" is invalid: {joined}',
            {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind, "causes": causes},
        )

    @classmethod
    def expired(cls, message: str) -> ApiError:
        return cls(410, "Expired", message)


def check_name(rt: ResourceType, name: Any) -> None:
    """422 Invalid unless `name` is a DNS-1123 subdomain (a DNS-1035 label for services)."""
    if not name:
        raise ApiError.invalid(
            rt,
            "",
            [
                {
                    "reason": "FieldValueRequired",
                    "field": "metadata.name",
                    "message": "Required value: name or generateName is required",
                }
            ],
        )
    label_only = rt.kind == "Service" and rt.builtin
    pattern, limit = (_LABEL_RE, 63) if label_only else (_SUBDOMAIN_RE, 253)
    if isinstance(name, str) and len(name) <= limit and pattern.match(name):
        return
    why = _LABEL_MSG if label_only else _SUBDOMAIN_MSG
    if isinstance(name, str) and len(name) > limit:
        why = f"must be no more than {limit} characters"
    raise ApiError.invalid(
        rt,
        str(name),
        [
            {
                "reason": "FieldValueInvalid",
                "field": "metadata.name",
                "message": f"Invalid value: {json.dumps(name)}: {why}",
            }
        ],
    )


# What kube-apiserver lets an anonymous request (no credentials) see: the system:public-info-viewer role.
PUBLIC_PATHS = frozenset({"/version", "/version/", "/healthz", "/livez", "/readyz"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def anonymous_forbidden(method: str, path: str, watch: bool) -> ApiError:
    """The 403 kube-apiserver (RBAC, anonymous authentication on) answers a request without credentials:
    `system:anonymous` is granted nothing but PUBLIC_PATHS."""
    user = 'User "system:anonymous"'
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return ApiError(403, "Forbidden", f'forbidden: {user} cannot {method.lower()} path "{path}"', {})
    namespace = None
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    collection = {"GET": "watch" if watch else "list", "DELETE": "deletecollection"}
    verb = _VERBS.get(method) or (method.lower() if name else collection.get(method, method.lower()))
    key = f"{plural}.{group}" if group else plural
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    resource = "/".join(rest[:1] + rest[2:3])
    message = (
        f"{key}{f' {chr(34)}{name}{chr(34)}' if name else ''} is forbidden: {user} cannot {verb} resource "
        f'"{resource}" in API group "{group}" {scope}'
    )
    details = {"name": name, "group": group, "kind": plural}
    return ApiError(403, "Forbidden", message, {k: v for k, v in details.items() if v})

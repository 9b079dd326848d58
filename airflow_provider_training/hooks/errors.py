"""Errors raised by the training-job hook."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from airflow_provider_training.kinds.api import ApiRequest, group_version_plural

RBAC_DOC = "docs/rbac.md"


class CredentialPluginError(Exception):
    """A kubeconfig user's ``exec`` or ``auth-provider`` plugin failed, or the client's loader that runs it.

    Its message carries what the plugin said (its stderr, which may name accounts or hold tokens): for the
    log of the component that ran it, never for a response that others read (the Training tab's)."""


class KubeConnectionError(Exception):
    """The API server could not be reached or its answer was cut: what the HTTP client raised, named by the
    server, and whether repeating the call may help (``transient``). A certificate the client cannot
    verify is not transient: kubectl fails at once, and so do we."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class KubeApiError(Exception):
    """A non-2xx answer of the Kubernetes API, with its ``Status`` body already parsed; it carries what the
    Kubernetes clients' ``ApiException`` carries (``status``, ``reason``, ``body``, ``headers``)."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.status_body: dict[str, Any] = dict(body or {})
        self.body = json.dumps(self.status_body).encode() if body else None
        self.headers = httpx.Headers(headers or {})
        # What was asked, e.g. "list pods in namespace default" (set by the transport).
        self.request: ApiRequest | None = None
        # For a resource the server does not serve in the asked version: the versions it serves it in, read
        # from discovery (set by the hook); empty when it serves it in none.
        self.served_in: list[str] = []

    @classmethod
    def from_response(cls, status: int, raw: bytes, headers: Mapping[str, str]) -> KubeApiError:
        """Build from an HTTP answer whose body is (usually) a ``Status`` object."""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"message": raw.decode("utf-8", errors="replace")}
        if not isinstance(body, dict):
            body = {"message": str(body)}
        return cls.from_status(body, status=status, headers=headers)

    @classmethod
    def from_status(
        cls, body: Mapping[str, Any], *, status: int | None = None, headers: Mapping[str, str] | None = None
    ) -> KubeApiError:
        """Build from a ``Status`` object (as a watch ``ERROR`` event carries it)."""
        code = int(body.get("code") or status or 0)
        return cls(code, str(body.get("reason") or ""), str(body.get("message") or ""), body, headers)

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (``Retry-After`` header or ``details.retryAfterSeconds``)."""
        value: Any = self.headers.get("Retry-After") if self.headers is not None else None
        if value is None:
            value = (self.status_body.get("details") or {}).get("retryAfterSeconds")
        try:
            return max(0.0, float(value)) if value is not None else None
        except (TypeError, ValueError):
            return None

    @property
    def resource_not_served(self) -> bool:
        """A 404 for the resource type itself, not for one named object: the server serves no such resource
        (its CustomResourceDefinition is not installed). A missing object's ``Status`` names it in
        ``details.name``; a missing type's answer does not (a real kube-apiserver answers in plain text,
        ``404 page not found``)."""
        return self.status == 404 and not (self.status_body.get("details") or {}).get("name")

    @property
    def unknown_fields(self) -> list[str]:
        """The fields a ``fieldValidation=Strict`` request was refused for (400, ``strict decoding error:
        unknown field "spec.x", ...``): ones the installed CustomResourceDefinition does not declare."""
        if self.status != 400 or "strict decoding error" not in self.message:
            return []
        return re.findall(r'unknown field "([^"]+)"', self.message)

    @property
    def refused(self) -> ApiRequest | None:
        """The request, when this is RBAC refusing it (403 for a resource request)."""
        return self.request if self.status == 403 and self.request and self.request.resource else None

    def __str__(self) -> str:
        if refused := self.refused:
            said = f" The API server said: {self.message}" if self.message else ""
            return (
                f"Kubernetes refused {refused.permission()} ({self.status} {self.reason or 'Forbidden'}): "
                f"the connection's identity lacks this permission; {RBAC_DOC} lists the Role it needs.{said}"
            )
        text = f"{self.request}: {self.status}" if self.request else f"Kubernetes API error {self.status}"
        if self.reason:
            text += f" {self.reason}"
        text = f"{text}: {self.message}" if self.message else text
        if self.unknown_fields:
            return f"{text}{UNKNOWN_FIELDS_HINT}"
        if not self.resource_not_served:
            return text
        return f"{text}{served_elsewhere(self.request, self.served_in) if self.served_in else CRD_HINT}"


CRD_HINT = " (is the resource's CustomResourceDefinition installed?)"
UNKNOWN_FIELDS_HINT = (
    " (the installed CustomResourceDefinition does not declare these fields, so the API server would have "
    "dropped them; is it another release of the operator than the manifest is written for? Nothing was "
    "created)"
)


def served_elsewhere(request: ApiRequest | None, versions: list[str]) -> str:
    """`` (this cluster serves mpijobs.kubeflow.org in v2beta1, not in v1: ...)``: a CRD that another
    release of an API defines under the same name, so that a cluster serves only one of them."""
    group, version, plural = group_version_plural(request) or ("", "", "")
    return (
        f" (this cluster serves {plural}.{group} in {', '.join(versions)}, not in {version}: the installed "
        f"CustomResourceDefinition is another release's; use apiVersion {group}/{versions[0]} or install the "
        f"one that serves {version})"
    )

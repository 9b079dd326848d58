"""A kubeconfig that points the real clients at localkube with a bearer token."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT = "localkube"


def kubeconfig_dict(
    url: str, token: str, namespace: str = "default", certificate_authority: bytes | None = None
) -> dict:
    """`certificate_authority`: the PEM the server's certificate is verified with (an https `url`)."""
    cluster: dict[str, str] = {"server": url}
    if certificate_authority is not None:
        cluster["certificate-authority-data"] = base64.b64encode(certificate_authority).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | os.PathLike[str],
    url: str,
    token: str,
    namespace: str = "default",
    certificate_authority: bytes | None = None,
) -> Path:
    """Write the kubeconfig (mode 0600: it holds the token) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(kubeconfig_dict(url, token, namespace, certificate_authority), handle, sort_keys=False)
    return target

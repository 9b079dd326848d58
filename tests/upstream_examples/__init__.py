"""Upstream example manifests the provider's tests use, vendored so the tests never depend on (or skip
without) ../shared/reference; each file's first line names its source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_training.testing import SCRIPT_ANNOTATION

HERE = Path(__file__).parent


def upstream_example(
    file_name: str, *, script: dict | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """The manifest in ``file_name``, with a scripted timeline for localkube and a namespace if given."""
    manifest: dict[str, Any] = yaml.safe_load((HERE / file_name).read_text())
    if script is not None:
        manifest["metadata"].setdefault("annotations", {})[SCRIPT_ANNOTATION] = json.dumps(script)
    if namespace is not None:
        manifest["metadata"]["namespace"] = namespace
    return manifest

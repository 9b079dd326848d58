"""Small manifests for the spec tests, a helper that asserts a SpecError names a field, and one that says what
an API server pruned of a manifest."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_training.specs import SpecError, load_job


def container(name: str, image: str | None = "busybox:1.36") -> dict[str, Any]:
    return {"name": name, "image": image} if image else {"name": name}


def replica(replicas: int | None, *containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": list(containers)}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def manifest(
    kind: str, key: str, replicas: dict[str, Any], name: str = "train", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {key: replicas, **spec},
    }


def pytorch(**overrides: Any) -> dict[str, Any]:
    job = manifest(
        "PyTorchJob",
        "pytorchReplicaSpecs",
        {
            "Master": replica(1, container("pytorch"), restartPolicy="OnFailure"),
            "Worker": replica(2, container("pytorch"), restartPolicy="OnFailure"),
        },
    )
    job["spec"].update(overrides)
    return job


def refused(job: Any, path: str, *fragments: str, **kwargs: Any) -> SpecError:
    """Loading ``job`` raises a SpecError with an error at ``path`` whose text holds every fragment."""
    with pytest.raises(SpecError) as info:
        load_job(copy.deepcopy(job) if isinstance(job, dict) else job, **kwargs)
    texts = [text for where, text in info.value.errors if where == path]
    assert texts, f"no error at {path!r}: {info.value.errors}"
    assert any(all(fragment in text for fragment in fragments) for text in texts), texts
    assert path in str(info.value)
    return info.value


def missing(sent: object, stored: object, path: str = "") -> list[str]:
    """The paths of ``sent`` that ``stored`` lacks: what a schema pruned (its defaults are extra)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return [p for key, value in sent.items() for p in _missing_key(key, value, stored, path)]
    if isinstance(sent, list) and isinstance(stored, list):
        return [
            p
            for i, (a, b) in enumerate(zip(sent, stored, strict=False))
            for p in missing(a, b, f"{path}[{i}]")
        ]
    return []


def _missing_key(key: str, value: object, stored: dict, path: str) -> list[str]:
    if value is None:  # an API server drops a null as it drops an absent field (upstream's `command: null`)
        return []
    return [f"{path}.{key}"] if key not in stored else missing(value, stored[key], f"{path}.{key}")

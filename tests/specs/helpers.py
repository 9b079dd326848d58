"""Small manifests for the spec tests, and a helper that asserts a SpecError names a field."""

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

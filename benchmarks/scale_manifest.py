"""What both sides of ``scale.py`` share, with no import at all: the submit child must not import anything
the operator's ``execute()`` would import (that would hide it from the first call's figure)."""

from __future__ import annotations

from typing import Any

MARK = "--- execute"  # scale_child.py marks each submit call on its stderr, before the call


def job_manifest(name: str) -> dict[str, Any]:
    """A PyTorchJob with a Master and a Worker (one replica each)."""
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox:1"}]}}
    replica = {"replicas": 1, "restartPolicy": "Never", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
    }

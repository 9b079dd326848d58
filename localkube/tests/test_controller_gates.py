"""The gate controller: a ConfigMap labelled ``localkube.dev/gates: open`` opens the gates its data names,
for a process the test does not share (``localkube agent`` against a real API server)."""

from __future__ import annotations

import time
from pathlib import Path

from localkube.controllers.gates import LABEL, GateController
from localkube.gates import close_gate, gate
from localkube.resources import CONFIGMAPS
from test_controller_builtin import running


def configmap(name: str, labels: dict[str, str], *gates: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": dict.fromkeys(gates, ""),
    }


def test_a_labelled_configmap_opens_the_gates_it_names_and_an_unlabelled_one_none(tmp_path: Path):
    for name in ("gc-a", "gc-b", "gc-unlabelled"):
        close_gate(name)
    with running(tmp_path, GateController()) as kube:
        store = kube.cluster.store
        store.create(CONFIGMAPS, "default", configmap("plain", {}, "gc-unlabelled"))
        store.create(CONFIGMAPS, "default", configmap("gates", {LABEL: "open"}, "gc-a", "gc-b"))
        assert _opens("gc-a") and _opens("gc-b")

        assert not gate("gc-unlabelled").is_open  # its ConfigMap came first, in the same event order


def _opens(name: str) -> bool:
    """Whether gate ``name`` opens within 30 s (a synchronisation helper)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if gate(name).is_open:
            return True
        time.sleep(0.02)
    return False

"""Gates over the API: open a scripted container's gate (:mod:`localkube.gates`) in a process the test does
not share, such as ``localkube agent`` against a real kube-apiserver, by writing a ConfigMap.

A ConfigMap labelled ``localkube.dev/gates: open``, in any namespace, opens the gate named by each of its
``data`` keys (values are ignored) when the controller sees it. Gates stay open, as in-process.
"""

from __future__ import annotations

from collections.abc import Hashable

from localkube.controllers.loop import ReconcileLoop
from localkube.gates import open_gate
from localkube.resources import CONFIGMAPS
from localkube.store import WatchEvent

LABEL = "localkube.dev/gates"


def opens(configmap: dict) -> list[str]:
    """The gates a ConfigMap opens: its data keys, when it carries the label."""
    if (configmap["metadata"].get("labels") or {}).get(LABEL) != "open":
        return []
    return sorted(configmap.get("data") or {})


class GateController(ReconcileLoop):
    """Opens the gates named by labelled ConfigMaps."""

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        if event.rt != CONFIGMAPS or event.type == "DELETED":
            return []
        return list(opens(event.object))

    def initial_keys(self) -> list[Hashable]:
        return [name for cm in self.store.list(CONFIGMAPS, None) for name in opens(cm)]

    def reconcile(self, key: str) -> float | None:
        open_gate(key)
        return None

"""What a Kubeflow v1 kind is (data only) and a job with the operator's defaults applied.

Defaulting follows kubeflow-v1.md §1 "Defaulting": replica-type keys in canonical case, `replicas` 1 (MPIJob:
Launcher 1, Worker 0), the per-kind restartPolicy, `cleanPodPolicy: None`, and the default port on the
container with the default name (else container 0). Like the operator's `scheme.Default`, this happens in
memory: the stored spec is never rewritten.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP, VERSION = "kubeflow.org", "v1"
API_VERSION = f"{GROUP}/{VERSION}"

OPERATOR_NAME = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"


@dataclass(frozen=True)
class KindData:
    """The static facts of one kind (kubeflow-v1.md §1 table)."""

    kind: str
    plural: str
    replica_field: str
    replica_types: tuple[str, ...]  # canonical spelling, in the order status rules visit them
    container: str
    port_name: str
    port: int
    restart_policy: str
    camel_case: tuple[str, ...] | None = None  # types whose key case is normalized; None = all
    default_replicas: Mapping[str, int] = field(default_factory=dict)  # else 1
    port_defaulting: bool = True
    extra_defaults: Callable[[dict], None] | None = None  # kind-specific spec defaults

    @property
    def controller_name(self) -> str:
        return f"{self.kind.lower()}-controller"


class JobView:
    """A job object plus the defaults the operator applies before reconciling it."""

    def __init__(self, data: KindData, job: dict) -> None:
        self.data = data
        self.job = copy.deepcopy(job)
        meta = self.job["metadata"]
        self.name: str = meta["name"]
        self.namespace: str = meta.get("namespace", "default")
        self.uid: str = meta.get("uid", "")
        self.spec: dict[str, Any] = self.job.setdefault("spec", {})
        self.run_policy: dict[str, Any] = self.spec.setdefault("runPolicy", {})
        self._default()

    # -- defaulting ----------------------------------------------------------------------------------------
    def _default(self) -> None:
        data = self.data
        specs: dict[str, dict] = self.spec.setdefault(data.replica_field, {}) or {}
        self.spec[data.replica_field] = specs
        for canonical in data.replica_types if data.camel_case is None else data.camel_case:
            for key in list(specs):
                if key != canonical and key.lower() == canonical.lower():
                    specs[canonical] = specs.pop(key)
                    break
        for rtype, spec in specs.items():
            if spec is None:
                continue
            if spec.get("replicas") is None:
                spec["replicas"] = data.default_replicas.get(rtype, 1)
            if not spec.get("restartPolicy"):
                spec["restartPolicy"] = data.restart_policy
            if data.port_defaulting:
                self._default_port(spec)
        if data.extra_defaults:
            data.extra_defaults(self.spec)
        if not self.run_policy.get("cleanPodPolicy"):
            self.run_policy["cleanPodPolicy"] = "None"

    def _default_port(self, spec: dict) -> None:
        containers = (spec.setdefault("template", {}).setdefault("spec", {})).get("containers") or []
        if not containers:
            return
        index = next((i for i, c in enumerate(containers) if c.get("name") == self.data.container), 0)
        ports = containers[index].setdefault("ports", [])
        if not any(p.get("name") == self.data.port_name for p in ports):
            ports.append({"name": self.data.port_name, "containerPort": self.data.port})

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def specs(self) -> dict[str, dict]:
        """Replica specs by type: the kind's canonical order first, then any other (unvalidated) types."""
        specs = self.spec[self.data.replica_field]
        order = [t for t in self.data.replica_types if specs.get(t) is not None]
        return {t: specs[t] for t in order + sorted(t for t in specs if t not in order and specs[t])}

    def has(self, rtype: str) -> bool:
        return rtype in self.specs

    def replicas(self, rtype: str) -> int:
        spec = self.specs.get(rtype)
        return int(spec.get("replicas") or 0) if spec else 0

    @property
    def total_replicas(self) -> int:
        return sum(self.replicas(t) for t in self.specs)

    def restart_policy(self, rtype: str) -> str:
        return str(self.specs[rtype]["restartPolicy"])

    def containers(self, rtype: str) -> list[dict]:
        return list(((self.specs[rtype].get("template") or {}).get("spec") or {}).get("containers") or [])

    def ports(self, rtype: str) -> dict[str, int]:
        """Named ports of the default container (a headless Service exposes these)."""
        for container in self.containers(rtype):
            if container.get("name") == self.data.container:
                return {
                    p["name"]: int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name")
                }
        return {}

    def port(self, rtype: str) -> int:
        return self.ports(rtype).get(self.data.port_name, self.data.port)

    def pod_name(self, rtype: str, index: int) -> str:
        return f"{self.name}-{rtype.lower()}-{index}".replace("/", "-")

    def base_labels(self) -> dict[str, str]:
        return {OPERATOR_NAME: self.data.controller_name, JOB_NAME: self.name.replace("/", "-")}

    def replica_labels(self, rtype: str, index: int | None) -> dict[str, str]:
        labels = {**self.base_labels(), REPLICA_TYPE: rtype.lower()}
        if index is not None:
            labels[REPLICA_INDEX] = str(index)
        return labels

    def selector(self, rtype: str) -> str:
        """`metav1.FormatLabelSelector` of the replica type's labels: keys sorted, comma-joined."""
        labels = self.replica_labels(rtype, None)
        return ",".join(f"{key}={labels[key]}" for key in sorted(labels))

    def owner_reference(self) -> dict:
        return {
            "apiVersion": API_VERSION,
            "kind": self.data.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def of_type(objs: list[dict], rtype: str) -> list[dict]:
    """The objects labelled with the (lower-case) replica type."""
    return [o for o in objs if (o["metadata"].get("labels") or {}).get(REPLICA_TYPE) == rtype.lower()]


def by_index(objs: list[dict]) -> dict[int, list[dict]]:
    """Objects by their replica-index label (objects without a valid index are left out)."""
    slices: dict[int, list[dict]] = {}
    for obj in objs:
        index = (obj["metadata"].get("labels") or {}).get(REPLICA_INDEX, "")
        if index.isdigit():
            slices.setdefault(int(index), []).append(obj)
    return slices

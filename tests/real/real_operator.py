"""Recording what Kubeflow's real training operator writes: every status a job passes through (from a watch),
and the pods and Services it made, as test data under tests/fixtures/real-operator/."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localkube.realcluster import RealCluster

from airflow_provider_training.testing import SCRIPT_ANNOTATION

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "real-operator"
TIME_FIELDS = {"lastTransitionTime", "lastUpdateTime", "startTime", "completionTime", "lastReconcileTime"}
JOB_LABEL = "training.kubeflow.org/job-name"


def scripts_on_pods(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with its script annotation also on every replica's pod template: the agent without the
    ``kubeflow`` controller does not know the kubeflow.org kinds, so its scripted runtime cannot read the
    script from the pod's owner."""
    annotation = {SCRIPT_ANNOTATION: job["metadata"]["annotations"][SCRIPT_ANNOTATION]}
    for key, specs in job["spec"].items():
        if key.endswith("ReplicaSpecs"):
            for spec in specs.values():
                metadata = spec["template"].setdefault("metadata", {})
                metadata["annotations"] = {**metadata.get("annotations", {}), **annotation}
    return job


def without_times(value: Any) -> Any:
    """``value`` with every timestamp field replaced by ``"<time>"`` (they differ on every run)."""
    if isinstance(value, dict):
        return {k: "<time>" if k in TIME_FIELDS else without_times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


@dataclass
class StatusRecording:
    """The job's statuses in the order a watch delivered them (consecutive equal ones once), and its last
    event type."""

    statuses: list[dict[str, Any]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    error: BaseException | None = None

    def add(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events.append(event_type)
        status = without_times(obj.get("status") or {})
        if not self.statuses or self.statuses[-1] != status:
            self.statuses.append(status)

    def condition_types(self) -> list[list[str]]:
        """Per recorded status, its True conditions' types in the order the status lists them."""
        return [[c["type"] for c in s.get("conditions", []) if c["status"] == "True"] for s in self.statuses]


@contextmanager
def recording(cluster: RealCluster, plural: str, namespace: str, name: str) -> Iterator[StatusRecording]:
    """Watch the job ``name`` from before it exists until it is deleted (the block must delete it)."""
    base = f"/apis/kubeflow.org/v1/namespaces/{namespace}/{plural}"
    version = cluster.get(base)["metadata"]["resourceVersion"]
    query = f"?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={version}&timeoutSeconds=300"
    req = urllib.request.Request(cluster.url + base + query)
    req.add_header("Authorization", f"Bearer {cluster._token}")
    context = ssl.create_default_context(cafile=str(cluster.certs["ca"]))
    response = urllib.request.urlopen(req, context=context, timeout=300)
    recorded = StatusRecording()

    def read() -> None:
        try:
            for line in response:
                event = json.loads(line)
                recorded.add(event["type"], event["object"])
                if event["type"] == "DELETED":
                    return
        except BaseException as exc:  # the test reports it
            recorded.error = exc

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield recorded
        thread.join(120)
    finally:
        response.close()
    assert not thread.is_alive(), f"the watch on {plural}/{name} saw no DELETED event"
    assert recorded.error is None, recorded.error


def children(cluster: RealCluster, namespace: str, name: str) -> dict[str, Any]:
    """The job's pods and Services as the operator made them: names, labels, init containers, env, ports."""
    selector = f"labelSelector={JOB_LABEL}%3D{name}"
    pods = cluster.get(f"/api/v1/namespaces/{namespace}/pods?{selector}")["items"]
    services = cluster.get(f"/api/v1/namespaces/{namespace}/services?{selector}")["items"]
    return {
        "pods": {
            p["metadata"]["name"]: {
                "labels": p["metadata"].get("labels", {}),
                "restartPolicy": p["spec"].get("restartPolicy"),
                "initContainers": [_container(c) for c in p["spec"].get("initContainers", [])],
                "containers": [_container(c) for c in p["spec"]["containers"]],
            }
            for p in sorted(pods, key=lambda p: p["metadata"]["name"])
        },
        "services": {
            s["metadata"]["name"]: {
                "labels": s["metadata"].get("labels", {}),
                "selector": s["spec"].get("selector", {}),
                "clusterIP": s["spec"].get("clusterIP"),
                "ports": s["spec"].get("ports", []),
            }
            for s in sorted(services, key=lambda s: s["metadata"]["name"])
        },
    }


def _container(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container["image"],
        "command": container.get("command"),
        "args": container.get("args"),
        "env": container.get("env", []),
        "ports": container.get("ports", []),
    }


def save(scenario: str, data: dict[str, Any]) -> Path:
    """Write ``data`` to tests/fixtures/real-operator/<scenario>.json (sorted keys, one run's record)."""
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    path = RECORDINGS / f"{scenario}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path

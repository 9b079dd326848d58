"""Objects shaped as the other API families' controllers create them, written into a localkube store by hand.

EDL (reference ``legacy-paddle-edl.md`` sections 5 and 8): the ``<job>-master`` and ``<job>-pserver``
ReplicaSets and the ``<job>-trainer`` batch Job carry no labels and no ownerReferences to the TrainingJob;
only their pod templates are labelled. Their pods are owned by the ReplicaSet or Job, as the built-in
controllers make them.
mlkube ``MxJob`` (``legacy-mxnet.md``): pods labelled ``mxnet.mlkube.io=""``, ``job_type``, ``runtime_id``,
``task_index`` and no job name; the pod name starts with the batch Job's ``<job>-<type>-<RuntimeId>-<index>``.
"""

from __future__ import annotations

from typing import Any

from localkube.cluster import LocalKube

from airflow_provider_training.kinds.base import BATCH_JOBS, PODS, REPLICASETS
from tests.hooks.kube_env import rtype

EDL_API_VERSION = "paddlepaddle.org/v1"
# replica type -> (child resource, child suffix, pod-template label, container)
EDL_REPLICAS = {
    "TRAINER": (BATCH_JOBS, "trainer", "paddle-job", "trainer"),
    "PSERVER": (REPLICASETS, "pserver", "paddle-job-pserver", "pserver"),
    "MASTER": (REPLICASETS, "master", "paddle-job-master", "master"),
}


def edl_training_job(name: str) -> dict[str, Any]:
    """A resource-lineage TrainingJob with the keys the controller needs (its defaults are never applied)."""
    return {
        "apiVersion": EDL_API_VERSION,
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "image": "paddlepaddle/edl-example",
            "port": 7164,
            "ports_num": 1,
            "ports_num_for_sparse": 1,
            "fault_tolerant": True,
            "passes": 1,
            "trainer": {"entrypoint": "python train.py", "workspace": "/workspace", "min-instance": 2},
            "pserver": {"min-instance": 2, "max-instance": 2},
            "master": {},
        },
    }


def _pod(name: str, labels: dict[str, str], container: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {"metadata": metadata, "spec": {"containers": [{"name": container, "image": "busybox"}]}}


def create_edl_children(
    cluster: LocalKube, job: str, namespace: str = "default", *, pods: dict[str, int] | None = None
) -> dict[str, list[str]]:
    """The controller's three children of ``job`` and their pods (default: 2 trainers, 2 pservers, 1 master).

    Returns the created names by resource key.
    """
    counts = pods or {"TRAINER": 2, "PSERVER": 2, "MASTER": 1}
    created: dict[str, list[str]] = {}
    for replica_type, (resource, suffix, label, container) in EDL_REPLICAS.items():
        template = {"metadata": {"labels": {label: job}}, "spec": {"containers": [{"name": container}]}}
        spec: dict[str, Any] = {"template": template}
        if resource == REPLICASETS:
            spec["replicas"] = counts.get(replica_type, 0)
        else:
            spec["parallelism"] = counts.get(replica_type, 0)
        body = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": f"{job}-{suffix}"},  # no labels: the EDL controller sets none
            "spec": spec,
        }
        owner = cluster.store.create(rtype(cluster, resource), namespace, body)
        created.setdefault(resource.key, []).append(owner["metadata"]["name"])
        for i in range(counts.get(replica_type, 0)):
            pod = _pod(f"{job}-{suffix}-{i:05d}", {label: job}, container, owner)
            created.setdefault(PODS.key, []).append(
                cluster.store.create(rtype(cluster, PODS), namespace, pod)["metadata"]["name"]
            )
    return created


def mlkube_pod_name(job: str, replica_type: str, index: int, runtime_id: str = "ab12") -> str:
    """``<job>-<type>-<RuntimeId>-<index>`` (the batch Job) plus the pod's random suffix."""
    return f"{job}-{replica_type.lower()}-{runtime_id}-{index}-x7k2p"


def create_mlkube_pod(
    cluster: LocalKube,
    job: str,
    replica_type: str,
    index: int,
    namespace: str = "default",
    runtime_id: str = "ab12",
) -> str:
    labels = {
        "mxnet.mlkube.io": "",
        "job_type": replica_type,
        "runtime_id": runtime_id,
        "task_index": str(index),
    }
    pod = _pod(mlkube_pod_name(job, replica_type, index, runtime_id), labels, "mxnet", None)
    return str(cluster.store.create(rtype(cluster, PODS), namespace, pod)["metadata"]["name"])


def names_in(cluster: LocalKube, resource: Any, namespace: str = "default") -> set[str]:
    return {obj["metadata"]["name"] for obj in cluster.store.list(rtype(cluster, resource), namespace)}


def edl_cluster_options() -> dict[str, Any]:
    """LocalKube options running the EDL controller and the built-in controllers it relies on."""
    from localkube.controllers.builtin import (
        BatchJobController,
        ReplicaSetController,
    )
    from localkube.controllers.paddle_edl import PaddleEdlController

    controllers = [PaddleEdlController(), BatchJobController(), ReplicaSetController()]
    return {"runtime": "scripted", "controllers": controllers}


def scripted_edl_job(name: str, script: dict[str, Any]) -> dict[str, Any]:
    """:func:`edl_training_job`, not elastic (2 trainers), with a scripted timeline per replica type."""
    import json

    manifest = edl_training_job(name)
    manifest["spec"]["trainer"]["max-instance"] = 2
    manifest["metadata"]["annotations"] = {"localkube.dev/script": json.dumps(script)}
    return manifest


def running_pods(cluster: LocalKube, namespace: str = "default") -> set[str]:
    pods = cluster.store.list(rtype(cluster, PODS), namespace)
    return {p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running"}

"""The environment each framework's controller injects into a replica pod (kubeflow-v1.md §4).

Every function takes the defaulted job, the pod template being built (mutated in place), the canonical
replica type and the replica index. Values are appended after the user's own env, as the operator does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from localkube.controllers.kubeflow_job import JobView

EnvInjector = Callable[[JobView, dict, str, int], None]

PYTORCH_INIT_IMAGE = "alpine:3.10"
PYTORCH_INIT_TRIES = 100


def _containers(template: dict) -> list[dict]:
    return list(template.setdefault("spec", {}).get("containers") or [])


def _set_all(template: dict, pairs: list[tuple[str, Any]]) -> None:
    for container in _containers(template):
        env = container.setdefault("env", [])
        env.extend({"name": name, "value": str(value)} for name, value in pairs)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def tensorflow(job: JobView, template: dict, rtype: str, index: int) -> None:
    """TF_CONFIG, only into the `tensorflow` container, only for distributed jobs."""
    distributed = ("Chief", "Evaluator", "Master", "PS", "Worker")
    if sum(job.replicas(t) for t in distributed if job.has(t)) == 1:
        return
    domain = os.environ.get("CUSTOM_CLUSTER_DOMAIN", "")
    suffix = f".{job.namespace}.svc" + (f".{domain}" if domain else "")
    cluster = {
        t.lower(): [f"{job.pod_name(t, i)}{suffix}:{job.port(t)}" for i in range(job.replicas(t))]
        for t in job.specs
    }
    task = {"type": rtype.lower(), "index": index}
    config: dict[str, Any]
    if job.spec.get("enableDynamicWorker"):
        sparse: dict[str, Any] = {"worker": {}, "ps": []}
        if rtype == "PS":
            sparse["ps"] = [cluster["ps"][index]]
        elif rtype == "Worker":
            sparse["ps"] = cluster.get("ps")
            sparse["worker"] = {str(index): cluster["worker"][index]}
        config = {"cluster": sparse, "task": task}
    else:
        config = {"cluster": dict(sorted(cluster.items())), "task": task, "environment": "cloud"}
    for container in _containers(template):
        if container.get("name") == job.data.container:
            container.setdefault("env", []).append({"name": "TF_CONFIG", "value": _compact(config)})
            break


def pytorch(job: JobView, template: dict, rtype: str, index: int) -> None:
    """Rendezvous env on every container; an `init-pytorch` init container on workers when a Master exists."""
    total = job.total_replicas
    nproc = job.spec.get("nprocPerNode")
    world_size = total * (int(nproc) if isinstance(nproc, str) and nproc.isdigit() else 1)
    elastic = job.spec.get("elasticPolicy")
    pairs: list[tuple[str, Any]] = [("PYTHONUNBUFFERED", "1")]
    if job.has("Master"):
        master_port, master_addr = job.port("Master"), job.pod_name("Master", 0)
        rank = index + 1 if rtype == "Worker" else index
        pairs += [
            ("MASTER_PORT", master_port),
            ("PET_MASTER_PORT", master_port),
            ("MASTER_ADDR", master_addr),
            ("PET_MASTER_ADDR", master_addr),
            ("WORLD_SIZE", world_size),
            ("RANK", rank),
            ("PET_NODE_RANK", rank),
        ]
    if nproc is not None:
        pairs.append(("PET_NPROC_PER_NODE", nproc))
    pairs += _elastic_env(job, elastic) if elastic is not None else [("PET_NNODES", total)]
    _set_all(template, pairs)
    if job.has("Master") and rtype == "Worker":
        master = job.pod_name("Master", 0)
        script = (
            f"err=1;for i in $(seq {PYTORCH_INIT_TRIES}); do if nslookup {master}; then err=0 && break; fi;"
            "echo waiting for master; sleep 2; done; exit $err"
        )
        template["spec"].setdefault("initContainers", []).append(
            {
                "name": "init-pytorch",
                "image": PYTORCH_INIT_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "limits": {"cpu": "100m", "memory": "20Mi"},
                    "requests": {"cpu": "50m", "memory": "10Mi"},
                },
                "command": ["sh", "-c", script],
            }
        )


def _elastic_env(job: JobView, policy: dict) -> list[tuple[str, Any]]:
    host = policy.get("rdzvHost") or f"{job.name}-worker-0"
    port = policy.get("rdzvPort") or job.port("Worker")
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    nnodes = job.replicas("Worker") if low is None and high is None else f"{low}:{high}"
    pairs: list[tuple[str, Any]] = [
        ("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        ("PET_RDZV_BACKEND", policy.get("rdzvBackend") or "c10d"),
        ("PET_NNODES", nnodes),
    ]
    if policy.get("maxRestarts") is not None:
        pairs.append(("PET_MAX_RESTARTS", policy["maxRestarts"]))
    if policy.get("nProcPerNode") is not None:
        pairs.append(("PET_NPROC_PER_NODE", policy["nProcPerNode"]))
    if policy.get("rdzvId") is not None:
        pairs.append(("PET_RDZV_ID", policy["rdzvId"]))
    if policy.get("rdzvConf"):
        pairs.append(("PET_RDZV_CONF", ",".join(f"{c['key']}={c['value']}" for c in policy["rdzvConf"])))
    if policy.get("standalone"):
        pairs.append(("PET_STANDALONE", ""))
    return pairs


def mxnet(job: JobView, template: dict, rtype: str, index: int) -> None:
    """MX_CONFIG and the DMLC_* variables on every container."""
    cluster = {
        t.lower(): [{"url": job.pod_name(t, i), "port": job.port(t)} for i in range(job.replicas(t))]
        for t in job.specs
    }
    labels = {
        t.lower(): ((spec.get("template") or {}).get("metadata") or {})
        .get("annotations", {})
        .get("tuner-server-key", "")
        for t, spec in job.specs.items()
    }
    config = {
        "cluster": dict(sorted(cluster.items())),
        "labels": dict(sorted(labels.items())),
        "task": {"type": rtype.lower(), "index": index},
    }
    scheduler = (cluster.get("scheduler") or [{"url": "", "port": 0}])[0]
    pairs: list[tuple[str, Any]] = [
        ("MX_CONFIG", _compact(config)),
        ("DMLC_PS_ROOT_PORT", scheduler["port"]),
        ("DMLC_PS_ROOT_URI", scheduler["url"]),
        ("DMLC_NUM_SERVER", len(cluster.get("server", []))),
        ("DMLC_NUM_WORKER", len(cluster.get("worker", []))),
        ("DMLC_ROLE", rtype.lower()),
        ("DMLC_USE_KUBERNETES", 1),
    ]
    if rtype == "Worker":
        pairs.append(("DMLC_WORKER_ID", index))
    _set_all(template, pairs)


def xgboost(job: JobView, template: dict, rtype: str, index: int) -> None:
    """Rabit tracker (and LightGBM) env on every container."""
    total = job.total_replicas
    rank = index + job.replicas("Master") if rtype == "Worker" else index
    pairs: list[tuple[str, Any]] = [
        ("MASTER_PORT", job.port("Master")),
        ("MASTER_ADDR", job.pod_name("Master", 0)),
        ("WORLD_SIZE", total),
        ("RANK", rank),
        ("PYTHONUNBUFFERED", "1"),
    ]
    if total > 1:
        workers = ",".join(job.pod_name("Worker", i) for i in range(total - 1))
        pairs += [("WORKER_PORT", job.port("Worker")), ("WORKER_ADDRS", workers)]
    _set_all(template, pairs)


def paddle(job: JobView, template: dict, rtype: str, index: int) -> None:
    """PADDLE_* on every container; the rendezvous pod itself advertises its own IP."""
    leader = "Master" if job.has("Master") else "Worker"
    endpoint = f"{job.pod_name(leader, 0)}:{job.port(leader)}"
    for container in _containers(template):
        env = container.setdefault("env", [])
        env += [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PADDLE_JOB_ID", "value": job.name},
            {"name": "PADDLE_NNODES", "value": str(job.total_replicas)},
        ]
        if index == 0 and rtype == leader:
            env.append({"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
            env.append({"name": "PADDLE_MASTER", "value": f"$(POD_IP_DUMMY):{job.port(leader)}"})
        else:
            env.append({"name": "PADDLE_MASTER", "value": endpoint})
        if leader == "Master":
            env.append(
                {"name": "PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM", "value": "1"}
            )


def jax(job: JobView, template: dict, rtype: str, index: int) -> None:
    """The coordinator (worker 0) address and the process id on every container."""
    _set_all(
        template,
        [
            ("PYTHONUNBUFFERED", "1"),
            ("COORDINATOR_PORT", job.port("Worker")),
            ("COORDINATOR_ADDRESS", job.pod_name("Worker", 0)),
            ("NUM_PROCESSES", job.total_replicas),
            ("PROCESS_ID", index),
        ],
    )

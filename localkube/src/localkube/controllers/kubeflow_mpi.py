"""MPIJob v1 specifics (kubeflow-v1.md §1 validation, §3 names, §4 launcher env).

The launcher is a bare pod `<job>-launcher` without a replica index; workers are `<job>-worker-<i>`; a
ConfigMap `<job>-config` carries the hostfile; no Services. An invalid job gets a Warning event only.
The launcher runs as the ServiceAccount `<job>-launcher`, which the operator creates with a Role and
RoleBinding of that name (a real API server refuses the launcher pod without it). localkube enforces no RBAC:
the Role is only stored.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from localkube.controllers import conditions as cond
from localkube.controllers.kubeflow_job import (
    JOB_ROLE,
    REPLICA_INDEX,
    by_index,
    of_type,
)
from localkube.resources import (
    CONFIGMAPS,
    PODS,
    RBAC_GROUP,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    ResourceType,
)
from localkube.store import ApiError, now_rfc3339

if TYPE_CHECKING:
    from localkube.controllers.kubeflow import Reconciliation

CONFIG_VOLUME, CONFIG_PATH = "mpi-job-config", "/etc/mpi"
KUBECTL_VOLUME, KUBECTL_PATH = "mpi-job-kubectl", "/opt/kube"
KUBECTL_DELIVERY_IMAGE = "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"  # TO-1.9's default
KUBEXEC, HOSTFILE, DISCOVER_HOSTS = "kubexec.sh", "hostfile", "discover_hosts.sh"


def validate(spec: dict) -> str | None:
    """`ValidateV1MpiJobSpec`: only Launcher/Worker, one Launcher replica, images and names set."""
    specs = spec.get("mpiReplicaSpecs")
    if not specs:
        return "MPIReplicaSpecs is not valid"
    for rtype, replica in specs.items():
        containers = (((replica or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            return f"MPIReplicaSpecs is not valid: containers definition expected in {rtype}"
        if rtype not in ("Launcher", "Worker"):
            return f"MPIReplicaType is {rtype} but must be one of [Launcher Worker]"
        for container in containers:
            if not container.get("image"):
                return f"MPIReplicaSpec is not valid: Image is undefined in the container of {rtype}"
            if not container.get("name"):
                return f"MPIReplicaSpec is not valid: ImageName is undefined in the container of {rtype}"
        if rtype == "Launcher" and replica.get("replicas") not in (None, 1):
            return "MPIReplicaSpec is not valid: There must be only 1 launcher replica"
    if "Launcher" not in specs:
        return "MPIReplicaSpec is not valid: Master ReplicaSpec must be present"
    return None


def reconcile_replicas(rec: Reconciliation) -> None:
    """Create the ConfigMap, the workers and the launcher until the launcher finished; count. As TO-1.9's
    MPIJob ReconcilePods, a failed pod is neither deleted nor recreated (only a missing one is created) and
    no ExitedWithCode event is recorded: the status rule makes a failed worker Restarting (ExitCode) or
    Failed, and the launcher decides."""
    job, status = rec.job, rec.status
    status.setdefault("startTime", now_rfc3339())
    launcher_counts = cond.reset_replica_status(status, "Launcher")
    worker_counts = cond.reset_replica_status(status, "Worker")
    launcher_name = f"{job.name}-launcher"
    launcher = next((p for p in rec.pods if p["metadata"]["name"] == launcher_name), None)
    workers = of_type(rec.pods, "Worker")
    finished = launcher is not None and _phase(launcher) in ("Succeeded", "Failed")
    if not finished:
        _sync_config_map(rec, workers)
        replicas = job.replicas("Worker")
        existing = by_index(workers)
        for index, pods in existing.items():
            if index >= replicas:
                for pod in pods:
                    rec.delete(PODS, pod["metadata"]["name"])
        for index in range(replicas):
            if index not in existing:
                rec.create(PODS, _worker_pod(rec, index))
        if launcher is None:
            _launcher_identity(rec, job.replicas("Worker"))
            rec.create(PODS, _launcher_pod(rec))
            rec.record("Normal", "MPIJobRunning", f"launcher pod created success: {launcher_name}")
    if launcher is not None:
        _count(launcher_counts, launcher)
    if not finished:
        for pod in workers:  # TO-1.9 lists no workers once the launcher finished: their counters stay 0
            _count(worker_counts, pod)


def _phase(pod: dict) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _count(counters: dict, pod: dict) -> None:
    key = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(_phase(pod))
    if key:
        counters[key] += 1


def _gpu_launcher(rec: Reconciliation) -> bool:
    for container in rec.job.containers("Launcher"):
        for resource in (container.get("resources") or {}).get("limits") or {}:
            if resource.endswith(".com/gpu") or "gpu" in resource:
                return True
    return False


def _sync_config_map(rec: Reconciliation, workers: list[dict]) -> None:
    job = rec.job
    slots = int(job.spec.get("slotsPerWorker") or 1)
    gpu = _gpu_launcher(rec)
    hosts = [f"{job.name}-launcher"] if gpu else []
    hosts += [f"{job.name}-worker-{i}" for i in range(job.replicas("Worker"))]
    kubexec = f"#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{KUBECTL_PATH}/kubectl exec ${{POD_NAME}}"
    if job.spec.get("mainContainer"):
        kubexec += f" --container {job.spec['mainContainer']}"
    kubexec += ' -- /bin/sh -c "$*"'
    running = sorted(p["metadata"]["name"] for p in workers if _phase(p) == "Running")
    discover = "#!/bin/sh" + (f"\necho {job.name}-launcher:{slots}\n" if gpu else "")
    discover += "".join(f"\necho {name}:{slots}" for name in running)
    data = {
        HOSTFILE: "".join(f"{host} slots={slots}\n" for host in hosts),
        KUBEXEC: kubexec,
        DISCOVER_HOSTS: discover,
    }
    name = f"{job.name}-config"
    try:
        current = rec.store.get(CONFIGMAPS, job.namespace, name)
    except ApiError as exc:
        if exc.code != 404:
            raise
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": job.namespace,
                "labels": {"app": job.name},
                "ownerReferences": [job.owner_reference()],
            },
            "data": data,
        }
        rec.create(CONFIGMAPS, config_map)
        return
    if current.get("data") != data:
        rec.store.replace(CONFIGMAPS, job.namespace, name, {**current, "data": data})


def _launcher_identity(rec: Reconciliation, workers: int) -> None:
    """The launcher's ServiceAccount, and a Role and RoleBinding (all `<job>-launcher`) that let it watch pods
    and exec into the workers, as `getOrCreateLauncherServiceAccount`/`Role`/`getLauncherRoleBinding` do."""
    job = rec.job
    name = f"{job.name}-launcher"
    meta: dict[str, Any] = {"name": name, "namespace": job.namespace, "labels": {"app": job.name}}
    meta["ownerReferences"] = [job.owner_reference()]
    workers_names = [f"{job.name}-worker-{i}" for i in range(workers)]
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"], "resourceNames": workers_names},
    ]
    subject = {"kind": "ServiceAccount", "name": name, "namespace": job.namespace}
    role_ref = {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name}
    rbac = f"{RBAC_GROUP}/v1"
    for rt, obj in (
        (SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        (ROLES, {"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": rules}),
        (
            ROLE_BINDINGS,
            {
                "apiVersion": rbac,
                "kind": "RoleBinding",
                "metadata": meta,
                "subjects": [subject],
                "roleRef": role_ref,
            },
        ),
    ):
        _create_once(rec, rt, obj)


def _create_once(rec: Reconciliation, rt: ResourceType, obj: dict) -> None:
    try:
        rec.store.create(rt, rec.job.namespace, copy.deepcopy(obj))
    except ApiError as exc:
        if exc.code != 409:
            raise


def _mpi_pod(rec: Reconciliation, rtype: str, index: int | None, name: str) -> tuple[dict, dict]:
    """A pod from the replica template with the generic labels; returns (pod, its first container)."""
    pod = rec.new_pod(rtype, 0, name=name)
    labels = pod["metadata"]["labels"]
    labels.pop(JOB_ROLE, None)
    if index is None:
        labels.pop(REPLICA_INDEX, None)
    else:
        labels[REPLICA_INDEX] = str(index)
    return pod, pod["spec"]["containers"][0]


def _worker_pod(rec: Reconciliation, index: int) -> dict:
    pod, container = _mpi_pod(rec, "Worker", index, f"{rec.job.name}-worker-{index}")
    if not container.get("command"):
        container["command"], container["args"] = ["sleep"], ["365d"]
    container.setdefault("volumeMounts", []).append({"name": CONFIG_VOLUME, "mountPath": CONFIG_PATH})
    items = [{"key": KUBEXEC, "path": KUBEXEC, "mode": 0o555}]
    pod["spec"].setdefault("volumes", []).append(_config_volume(rec, items))
    return pod


def _launcher_pod(rec: Reconciliation) -> dict:
    job = rec.job
    pod, container = _mpi_pod(rec, "Launcher", None, f"{job.name}-launcher")
    pod["metadata"]["labels"][JOB_ROLE] = "master"
    spec = pod["spec"]
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = f"{job.name}-launcher"
    mounts = [
        {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_PATH},
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_PATH},
    ]
    limits: dict[str, Any] = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    spec.setdefault("initContainers", []).append(
        {
            "name": "kubectl-delivery",
            "image": KUBECTL_DELIVERY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "env": [
                {"name": "TARGET_DIR", "value": KUBECTL_PATH},
                {"name": "NAMESPACE", "value": job.namespace},
            ],
            "volumeMounts": [dict(m) for m in mounts],
            "resources": {"limits": limits, "requests": dict(limits)},
        }
    )
    env = container.setdefault("env", [])
    env += [
        {"name": "OMPI_MCA_plm_rsh_agent", "value": f"{CONFIG_PATH}/{KUBEXEC}"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{CONFIG_PATH}/{HOSTFILE}"},
    ]
    if not _gpu_launcher(rec):
        # Value "" on the Go side: omitempty leaves the key out of what the API server returns.
        env += [{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
    names = {e["name"] for e in env}
    if "I_MPI_HYDRA_BOOTSTRAP" not in names:
        env.append({"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "rsh"})
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in names:
        env.append({"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": f"{CONFIG_PATH}/{KUBEXEC}"})
    container.setdefault("volumeMounts", []).extend(mounts)
    items = [
        {"key": KUBEXEC, "path": KUBEXEC, "mode": 0o555},
        {"key": HOSTFILE, "path": HOSTFILE, "mode": 0o444},
        {"key": DISCOVER_HOSTS, "path": DISCOVER_HOSTS, "mode": 0o555},
    ]
    spec.setdefault("volumes", []).extend(
        [{"name": KUBECTL_VOLUME, "emptyDir": {}}, _config_volume(rec, items)]
    )
    return pod


def _config_volume(rec: Reconciliation, items: list[dict]) -> dict:
    return {"name": CONFIG_VOLUME, "configMap": {"name": f"{rec.job.name}-config", "items": items}}

"""The standalone MPI Operator's `kubeflow.org/v2beta1` MPIJob (kubeflow-v1.md §6a; kubeflow/mpi-operator v2).

Its CRD has the v1 MPIJob's name, `mpijobs.kubeflow.org`, so a real cluster serves one of the two; localkube
serves v2beta1 when its CRD is loaded (`crd_dir`), and this controller idles otherwise.

- **Workers** are pods `<job>-worker-<i>` (hostname, and the headless Service `<job>` as subdomain), created
  at once; the **launcher** is a batch/v1 Job `<job>-launcher`, whose pod the batch Job controller creates
  (`<job>-launcher-<5 random>`): at once under `launcherCreationPolicy: AtStartup` (the default), once every
  worker runs under `WaitForWorkersReady`. The Job gets `runPolicy.backoffLimit` and
  `activeDeadlineSeconds`. A ConfigMap `<job>-config` holds the hostfile, a Secret `<job>-ssh` the SSH key.
- **Labels**: `training.kubeflow.org/operator-name=mpi-operator`, `job-name`, `job-role=launcher|worker` and,
  on workers only, `replica-index` (shifted by one under `runLauncherAsWorker`, the launcher then `"0"`); no
  `replica-type`. **Env**: `K_MPI_JOB_ROLE`, and the MPI implementation's host file variables.
- **Status** (the v1 shape): `Created` (`MPIJobCreated`) at once, `Running` (`MPIJobRunning`) once the
  launcher and every worker run, `Succeeded` (`MPIJobSucceeded`) when the launcher Job completes, `Failed`
  when it fails, with the Job's reason (`BackoffLimitExceeded`, `DeadlineExceeded`); a job that finishes
  without ever running gets `Running=False`. `replicaStatuses` count the launcher Job's pods and the workers.
- **Restart policy**: the replica spec's (launcher `OnFailure`, workers `Never` by default) replaces the pod
  template's, as upstream's `setRestartPolicy` does; a failing launcher restarts in place until the Job's
  `backoffLimit` (default 6) counts its restarts.
- **Suspend** (`runPolicy.suspend`): the workers are deleted and the launcher Job suspended
  (`MPIJobSuspended`); resuming (`MPIJobResumed`) creates them again.
- **cleanPodPolicy** (default `None`): after the job finished, `Running` deletes the workers still
  running, `All` every worker.

Simplified: no SSH key material (the Secret holds a placeholder), no `Evicted` reason, no MPI process; the
pods run under localkube's runtime like any other (the scripted runtime: the job's script, folded onto each
pod since these pods carry no replica-type label).
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from localkube.controllers import conditions as cond
from localkube.controllers.builtin import (
    create_quietly,
    delete_quietly,
    folded_script,
    get_live,
    owner_reference,
    same_type,
    served,
    with_script,
)
from localkube.controllers.kubeflow import controller_ref, phase
from localkube.controllers.loop import ReconcileLoop
from localkube.events import record_event
from localkube.resources import BATCH_JOBS, CONFIGMAPS, PODS, SECRETS, SERVICES, ResourceType
from localkube.store import ApiError, WatchEvent

if TYPE_CHECKING:
    from localkube.api import ClusterApi

MPIJOBS_V2BETA1 = ResourceType("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", "mpijob")
OPERATOR_NAME = "mpi-operator"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
LAUNCHER, WORKER = "Launcher", "Worker"
RESTART_POLICY_REASON = "SetPodTemplateRestartPolicy"
HOSTFILE_ENV = {
    "OpenMPI": {
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    },
    "Intel": {"I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile"},
    "MPICH": {"HYDRA_HOST_FILE": "/etc/mpi/hostfile"},
}


class MpiOperatorController(ReconcileLoop):
    """Reconciles `kubeflow.org/v2beta1` MPIJobs on their own changes and their pods' and launcher Jobs'."""

    def initial_keys(self) -> list[Hashable]:
        if not served(self.store, MPIJOBS_V2BETA1):
            return []
        return [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in self.store.list(MPIJOBS_V2BETA1)]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if same_type(event.rt, MPIJOBS_V2BETA1):
            return [] if event.type == "DELETED" else [(meta["namespace"], meta["name"])]
        labels = meta.get("labels") or {}
        if event.rt == PODS and labels.get(OPERATOR_LABEL) == OPERATOR_NAME and JOB_NAME in labels:
            return [(meta["namespace"], labels[JOB_NAME])]
        ref = controller_ref(event.object) if event.rt in (PODS, BATCH_JOBS) else None
        if ref and ref.get("apiVersion") == MPIJOBS_V2BETA1.api_version and ref.get("kind") == "MPIJob":
            return [(meta["namespace"], ref["name"])]
        return []

    def reconcile(self, key: Any) -> float | None:
        job = get_live(self.store, MPIJOBS_V2BETA1, *key)
        if job is None:
            return None
        _MpiJob(self.store, job).sync()
        return None


class _MpiJob:
    """One reconcile of one MPIJob."""

    def __init__(self, store: ClusterApi, job: dict) -> None:
        self.store, self.job = store, job
        self.name, self.namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        self.spec = job.get("spec") or {}
        self.run_policy = self.spec.get("runPolicy") or {}
        self.status = cond.status_of(job)

    def sync(self) -> None:
        if not self.status.get("conditions"):
            cond.set_condition(self.status, cond.CREATED, "True", "MPIJobCreated", self._says("is created"))
        launcher_job = self._get(BATCH_JOBS, f"{self.name}-launcher")
        if cond.is_finished(self.status):
            self._clean_pods()
        elif self.run_policy.get("suspend"):
            self._suspend(launcher_job)
        else:
            self._run(launcher_job)
        self._count(launcher_job)
        self._write()

    # -- running -------------------------------------------------------------------------------------------
    def _run(self, launcher_job: dict | None) -> None:
        if cond.is_true(self.status, cond.SUSPENDED):
            cond.set_condition(
                self.status, cond.SUSPENDED, "False", "MPIJobResumed", self._says("is resumed")
            )
        self._ensure_support_objects()
        workers = self._ensure_workers()
        all_running = all(phase(p) == "Running" for p in workers)
        wait = self.spec.get("launcherCreationPolicy") == "WaitForWorkersReady"
        if launcher_job is None and (all_running or not wait):
            launcher_job = create_quietly(self.store, BATCH_JOBS, self.namespace, self._launcher_job())
        elif launcher_job is not None and (launcher_job.get("spec") or {}).get("suspend"):
            launcher_job = self.store.patch(
                BATCH_JOBS,
                self.namespace,
                launcher_job["metadata"]["name"],
                {"spec": {"suspend": False}},
                "application/merge-patch+json",
            )
        job_status = (launcher_job or {}).get("status") or {}
        failed = _true_condition(job_status, "Failed")
        if _true_condition(job_status, "Complete") is not None:
            self._finish(cond.SUCCEEDED, "MPIJobSucceeded", self._says("successfully completed"))
        elif failed is not None:
            reason = str(failed.get("reason") or "MPIJobFailed")
            detail = failed.get("message") or reason
            self._finish(cond.FAILED, reason, f"MPIJob {self.namespace}/{self.name} has failed: {detail}")
        elif int(job_status.get("active") or 0) and all_running and self._launcher_running():
            cond.set_condition(self.status, cond.RUNNING, "True", "MPIJobRunning", self._says("is running"))

    def _finish(self, type_: str, reason: str, message: str) -> None:
        if not any(c.get("type") == cond.RUNNING for c in self.status.get("conditions") or []):
            cond.set_condition(
                self.status, cond.RUNNING, "False", "MPIJobRunning", self._says("is not running")
            )
        cond.finish(self.status, type_, reason, message)
        self._clean_pods()

    def _suspend(self, launcher_job: dict | None) -> None:
        for pod in self._workers():
            delete_quietly(self.store, PODS, pod)
        if launcher_job is not None and not (launcher_job.get("spec") or {}).get("suspend"):
            self.store.patch(
                BATCH_JOBS,
                self.namespace,
                launcher_job["metadata"]["name"],
                {"spec": {"suspend": True}},
                "application/merge-patch+json",
            )
        if cond.is_true(self.status, cond.RUNNING):
            cond.set_condition(
                self.status, cond.RUNNING, "False", "MPIJobSuspended", self._says("is suspended")
            )
        cond.set_condition(self.status, cond.SUSPENDED, "True", "MPIJobSuspended", self._says("is suspended"))

    def _clean_pods(self) -> None:
        policy = self.run_policy.get("cleanPodPolicy") or "None"
        for pod in self._workers():
            if policy == "All" or (policy == "Running" and phase(pod) in ("Pending", "Running")):
                delete_quietly(self.store, PODS, pod)

    # -- children ------------------------------------------------------------------------------------------
    def _workers(self) -> list[dict]:
        selector = f"{OPERATOR_LABEL}={OPERATOR_NAME},{JOB_NAME}={self.name},{JOB_ROLE}=worker"
        pods = self.store.list(PODS, self.namespace, label_selector=selector)
        uid = self.job["metadata"]["uid"]
        return [p for p in pods if (controller_ref(p) or {}).get("uid") == uid]

    def _ensure_workers(self) -> list[dict]:
        replicas = int((self._replica_spec(WORKER) or {}).get("replicas") or 0)
        existing = {p["metadata"]["name"]: p for p in self._workers()}
        shift = 1 if self.spec.get("runLauncherAsWorker") else 0
        for index in range(replicas):
            name = f"{self.name}-worker-{index}"
            if name not in existing:
                pod = create_quietly(self.store, PODS, self.namespace, self._worker_pod(index, index + shift))
                if pod is not None:
                    existing[name] = pod
        return list(existing.values())

    def _worker_pod(self, index: int, label_index: int) -> dict:
        name = f"{self.name}-worker-{index}"
        template = self._template(WORKER, ["worker", f"worker-{index}"])
        spec = _with_env(template.get("spec") or {}, self._env("worker"))
        spec.update(hostname=name, subdomain=self.name)
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), **self._labels("worker"), REPLICA_INDEX: str(label_index)}
        metadata: dict[str, Any] = {
            "name": name,
            "labels": labels,
            "ownerReferences": [owner_reference(self.job)],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = tmeta["annotations"]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def _launcher_job(self) -> dict:
        template = self._template(LAUNCHER, ["launcher", "launcher-0"])
        labels = self._labels("launcher")
        if self.spec.get("runLauncherAsWorker"):
            labels[REPLICA_INDEX] = "0"
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
        template["spec"] = _with_env(template.get("spec") or {}, self._env("launcher"))
        job_spec: dict[str, Any] = {"template": template}
        for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
            if self.run_policy.get(key) is not None:
                job_spec[key] = self.run_policy[key]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{self.name}-launcher",
                "labels": labels,
                "ownerReferences": [owner_reference(self.job)],
            },
            "spec": job_spec,
        }

    def _ensure_support_objects(self) -> None:
        workers = int((self._replica_spec(WORKER) or {}).get("replicas") or 0)
        slots = int(self.spec.get("slotsPerWorker") or 1)
        hosts = [f"{self.name}-worker-{i}.{self.name}.{self.namespace}.svc" for i in range(workers)]
        owned: dict[str, Any] = {"ownerReferences": [owner_reference(self.job)], "labels": self._labels(None)}
        config: dict[str, Any] = {
            "metadata": {"name": f"{self.name}-config", **owned},
            "data": {"hostfile": "".join(f"{host} slots={slots}\n" for host in hosts)},
        }
        service: dict[str, Any] = {
            "metadata": {"name": self.name, **owned},
            "spec": {"clusterIP": "None", "selector": {JOB_NAME: self.name, OPERATOR_LABEL: OPERATOR_NAME}},
        }
        secret: dict[str, Any] = {
            "metadata": {"name": f"{self.name}-ssh", **owned},
            "type": "kubernetes.io/ssh-auth",
            "stringData": {"ssh-privatekey": "localkube: no key material"},
        }
        for rt, obj in ((CONFIGMAPS, config), (SERVICES, service), (SECRETS, secret)):
            if self._get(rt, obj["metadata"]["name"]) is None:
                create_quietly(self.store, rt, self.namespace, obj)

    def _launcher_running(self) -> bool:
        selector = f"{JOB_NAME}={self.name},{JOB_ROLE}=launcher"
        pods = self.store.list(PODS, self.namespace, label_selector=selector)
        return any(phase(p) == "Running" for p in pods)

    # -- status --------------------------------------------------------------------------------------------
    def _count(self, launcher_job: dict | None) -> None:
        job_status = (launcher_job or {}).get("status") or {}
        launcher = cond.reset_replica_status(self.status, LAUNCHER)
        for name in ("active", "succeeded", "failed"):
            launcher[name] = int(job_status.get(name) or 0)
        worker = cond.reset_replica_status(self.status, WORKER)
        for pod in self._workers():
            state = phase(pod)
            if state == "Running":
                worker["active"] += 1
            elif state == "Succeeded":
                worker["succeeded"] += 1
            elif state == "Failed":
                worker["failed"] += 1
        if self._replica_spec(WORKER) is None:
            del self.status["replicaStatuses"][WORKER]

    def _write(self) -> None:
        status = cond.to_json(self.status)
        status.setdefault("startTime", self.job["metadata"].get("creationTimestamp"))
        if status != (self.job.get("status") or {}):
            self.store.update_status(MPIJOBS_V2BETA1, self.namespace, self.name, status)

    # -- helpers -------------------------------------------------------------------------------------------
    def _says(self, what: str) -> str:
        return f"MPIJob {self.namespace}/{self.name} {what}."

    def _replica_spec(self, rtype: str) -> dict | None:
        return (self.spec.get("mpiReplicaSpecs") or {}).get(rtype)

    def _template(self, rtype: str, selectors: list[str]) -> dict:
        """The replica's pod template, its restart policy the replica spec's (the launcher's defaults to
        `OnFailure`, a worker's to `Never`; `ExitCode` is `Never` on the pod), as the operator sets it: a
        policy written in the template is overridden (the launcher's with the Warning event
        `SetPodTemplateRestartPolicy`, as upstream warns when it builds the launcher Job)."""
        replica = self._replica_spec(rtype) or {}
        template = copy.deepcopy(replica.get("template") or {})
        spec = template.setdefault("spec", {})
        if spec.get("restartPolicy") and rtype == LAUNCHER:
            message = "Restart policy in pod template overridden by restart policy in replica spec"
            record_event(self.store, self.job, "Warning", RESTART_POLICY_REASON, message, OPERATOR_NAME)
        policy = replica.get("restartPolicy") or ("OnFailure" if rtype == LAUNCHER else "Never")
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        return with_script(template, folded_script(self.job, selectors))

    def _labels(self, role: str | None) -> dict[str, str]:
        labels = {OPERATOR_LABEL: OPERATOR_NAME, JOB_NAME: self.name}
        return labels if role is None else {**labels, JOB_ROLE: role}

    def _env(self, role: str) -> dict[str, str]:
        implementation = self.spec.get("mpiImplementation") or "OpenMPI"
        return {"K_MPI_JOB_ROLE": role, **HOSTFILE_ENV.get(implementation, {})}

    def _get(self, rt: ResourceType, name: str) -> dict | None:
        try:
            return self.store.get(rt, self.namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise


def _true_condition(status: dict, type_: str) -> dict | None:
    return next(
        (c for c in status.get("conditions") or [] if c.get("type") == type_ and c.get("status") == "True"),
        None,
    )


def _with_env(spec: dict, env: dict[str, str]) -> dict:
    """The pod spec with `env` added to every container (a container's own value of a name wins)."""
    spec = copy.deepcopy(spec)
    for container in spec.get("containers") or []:
        names = {e.get("name") for e in container.get("env") or []}
        container["env"] = [
            *(container.get("env") or []),
            *({"name": k, "value": v} for k, v in env.items() if k not in names),
        ]
    return spec

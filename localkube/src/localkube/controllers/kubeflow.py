"""The emulated Kubeflow Training Operator v1: one generic controller for all seven kinds.

One reconcile follows the operator's `ReconcileJobs` (kubeflow-v1.md §1-3): a finished job is only cleaned
up (cleanPodPolicy, ttlSecondsAfterFinished); a suspended one loses its pods; otherwise backoffLimit and
activeDeadlineSeconds are checked (the deadline only on a pass that something else caused, as upstream),
missing pods and Services are created, failed pods are restarted per restartPolicy, and the kind's rule
turns the replica counters into conditions. Pods are only created and deleted here; a pod runtime (the
kubelet's part) moves them through their phases.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from localkube.controllers import conditions as cond
from localkube.controllers import kubeflow_mpi as mpi
from localkube.controllers.kubeflow_job import (
    API_VERSION,
    GROUP,
    JOB_ROLE,
    VERSION,
    JobView,
    by_index,
    of_type,
)
from localkube.controllers.kubeflow_kinds import KUBEFLOW_KINDS, KubeflowKind
from localkube.controllers.kubeflow_rules import StatusContext, default_exit_code
from localkube.controllers.loop import ReconcileLoop
from localkube.events import record_event
from localkube.resources import CONFIGMAPS, PODS, SERVICES, ResourceType
from localkube.store import ApiError, WatchEvent, now_rfc3339

if TYPE_CHECKING:
    from localkube.api import ClusterApi

JobKey = tuple[str, str, str]  # kind, namespace, name
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
TEMPLATE_RESTART_POLICY = (
    "Restart policy in pod template will be overwritten by restart policy in replica spec"
)


def phase(pod: dict) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def controller_ref(obj: dict) -> dict | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


class KubeflowController(ReconcileLoop):
    """Reconciles every `kubeflow.org/v1` job kind in the store."""

    def __init__(self, kinds: tuple[KubeflowKind, ...] = KUBEFLOW_KINDS) -> None:
        super().__init__()
        self.kinds = {k.kind: k for k in kinds}
        self._types: dict[str, ResourceType] = {}
        self.seen: dict[JobKey, set[tuple[str, ...]]] = {}  # events already recorded, per job

    async def run(self, cluster: Any) -> None:
        self._types = self._resource_types(cluster.store)
        await super().run(cluster)

    def _resource_types(self, store: ClusterApi) -> dict[str, ResourceType]:
        types = {}
        for kind in self.kinds.values():
            try:
                types[kind.kind] = store.resource_type(GROUP, VERSION, kind.data.plural)
            except ApiError:  # a cluster serving another MPIJob version, or no such CRD
                continue
        return types

    # -- event mapping -------------------------------------------------------------------------------------
    def initial_keys(self) -> list[Hashable]:
        return [
            (kind, job["metadata"]["namespace"], job["metadata"]["name"])
            for kind, rt in self._types.items()
            for job in self.store.list(rt)
        ]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if event.rt.kind in self._types and self._types[event.rt.kind] == event.rt:
            key = (event.rt.kind, meta["namespace"], meta["name"])
            if event.type == "DELETED":
                self.seen.pop(key, None)
                return []
            return [key]
        if event.rt in (PODS, SERVICES, CONFIGMAPS):
            ref = controller_ref(event.object)
            if ref and ref.get("apiVersion") == API_VERSION and ref.get("kind") in self._types:
                return [(ref["kind"], meta["namespace"], ref["name"])]
        return []

    # -- reconcile -----------------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> float | None:
        kind_name, namespace, name = key
        try:
            job = self.store.get(self._types[kind_name], namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        meta, spec = job["metadata"], job.get("spec") or {}
        if meta.get("deletionTimestamp") or (spec.get("runPolicy") or {}).get("managedBy") == MULTIKUEUE:
            return None
        kind = self.kinds[kind_name]
        if kind.mpi:
            problem = mpi.validate(spec)
            if problem:
                message = f"MPIJob failed validation because {problem}"
                self.record(kind, job, "Warning", "MPIJobFailedValidation", message, once=())
                return None
        return Reconciliation(self, kind, job).run()

    def record(
        self,
        kind: KubeflowKind,
        job: dict,
        type_: str,
        reason: str,
        message: str,
        *,
        once: tuple | None = None,
    ) -> None:
        """An event on the job; with `once`, only the first time per job (the operator repeats some on every
        pass, e.g. ExitedWithCode, where a real recorder would only bump a count)."""
        if once is not None:
            seen = self.seen.setdefault(
                (kind.kind, job["metadata"]["namespace"], job["metadata"]["name"]), set()
            )
            token = (reason, message, *once)
            if token in seen:
                return
            seen.add(token)
        record_event(self.store, job, type_, reason, message, kind.data.controller_name)


class Reconciliation:
    """One pass over one job: reads its pods and services, writes pods, services and the job status."""

    def __init__(self, controller: KubeflowController, kind: KubeflowKind, job: dict):
        self.controller, self.kind, self.raw = controller, kind, job
        self.store: ClusterApi = controller.store
        self.rt = controller._types[kind.kind]
        self.job = JobView(kind.data, job)
        self.status = cond.status_of(job)
        self.pods = self._owned(PODS)
        self.services = self._owned(SERVICES)

    # -- plumbing ------------------------------------------------------------------------------------------
    def _owned(self, rt: ResourceType) -> list[dict]:
        labels = self.job.base_labels()
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        return [
            obj
            for obj in self.store.list(rt, self.job.namespace, label_selector=selector)
            if (controller_ref(obj) or {}).get("uid") == self.job.uid
        ]

    def record(self, type_: str, reason: str, message: str) -> None:
        self.controller.record(self.kind, self.raw, type_, reason, message)

    def record_once(self, type_: str, reason: str, message: str, *identity: str) -> None:
        self.controller.record(self.kind, self.raw, type_, reason, message, once=identity)

    def reason(self, what: str) -> str:
        return f"{self.kind.kind}{what}"

    def create(self, rt: ResourceType, obj: dict) -> None:
        """Create a child; a refusal (e.g. 422 for a pod without containers) is the operator's Warning event
        `FailedCreatePod` ("Error creating: ..."), raised so the pass is retried with backoff."""
        try:
            self.store.create(rt, self.job.namespace, obj)
        except ApiError as exc:
            if exc.code != 409:  # already there: the next pass sees it
                self.record("Warning", f"FailedCreate{rt.kind}", f"Error creating: {exc.message}")
                raise
            return
        self.record(
            "Normal", f"SuccessfulCreate{rt.kind}", f"Created {rt.kind.lower()}: {obj['metadata']['name']}"
        )

    def delete(self, rt: ResourceType, name: str) -> None:
        try:
            self.store.delete(rt, self.job.namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self.record("Normal", f"SuccessfulDelete{rt.kind}", f"Deleted {rt.kind.lower()}: {name}")

    def write(self) -> None:
        new = cond.to_json(self.status)
        if new != (self.raw.get("status") or {}):
            self.store.update_status(self.rt, self.job.namespace, self.job.name, new)

    # -- the pass ------------------------------------------------------------------------------------------
    def run(self) -> float | None:
        status, job = self.status, self.job
        if not any(c.get("type") == cond.CREATED for c in status.get("conditions") or []):
            cond.set_condition(
                status,
                cond.CREATED,
                "True",
                self.reason("Created"),
                f"{job.data.kind} {job.name} is created.",
            )
        if cond.is_finished(status):
            return self._finished()
        if job.run_policy.get("suspend"):
            self._suspend()
            return None
        if cond.is_true(status, cond.SUSPENDED):
            message = f"{job.data.kind} {job.name} is resumed."
            cond.set_condition(status, cond.SUSPENDED, "False", self.reason("Resumed"), message)
            status["startTime"] = now_rfc3339()
            self.record("Normal", self.reason("Resumed"), message)
        self._record_abnormal_pods()
        failure = self._exceeded_limit()
        if failure:
            self.delete_pods_and_services()  # before the job is finished: every pod, whatever cleanPodPolicy
            cond.finish(status, cond.FAILED, self.reason("Failed"), failure)
            self.record("Normal", self.reason("Failed"), failure)
            self.write()
            return None
        if self.kind.mpi:
            mpi.reconcile_replicas(self)
        else:
            for rtype in job.specs:
                self.reconcile_pods(rtype)
                self.reconcile_services(rtype)
        status.setdefault("startTime", now_rfc3339())
        self.kind.status_rule(StatusContext(job, status, self.pods, self.record))
        self.write()
        # No requeue at activeDeadlineSeconds: TO-1.9's reconcilers send theirs to a no-op work queue
        # (kubeflow/trainer#3358), so the deadline is checked only when something else makes it reconcile.
        return None

    def _finished(self) -> float | None:
        self.delete_pods_and_services()
        remaining = self._ttl_remaining()
        if remaining is not None and remaining < 0:
            self.store.delete(self.rt, self.job.namespace, self.job.name)
            self.record("Normal", "SuccessfulDeleteJob", f"Deleted job: {self.job.name}")
            return None
        if cond.is_true(self.status, cond.SUCCEEDED):
            for counters in (self.status.get("replicaStatuses") or {}).values():
                counters["succeeded"] += counters["active"]
                counters["active"] = 0
        self.write()
        return remaining

    def _suspend(self) -> None:
        status, job = self.status, self.job
        self.delete_pods_and_services()
        for counters in (status.get("replicaStatuses") or {}).values():
            counters["active"] = 0
        message = f"{job.data.kind} {job.name} is suspended."
        if cond.is_true(status, cond.RUNNING):
            cond.set_condition(status, cond.RUNNING, "False", self.reason("Suspended"), message)
        if not cond.is_true(status, cond.SUSPENDED):
            cond.set_condition(status, cond.SUSPENDED, "True", self.reason("Suspended"), message)
            self.record("Normal", self.reason("Suspended"), message)
        self.write()

    def _ttl_remaining(self) -> float | None:
        ttl = self.job.run_policy.get("ttlSecondsAfterFinished")
        completion = self.status.get("completionTime")
        if ttl is None or self.job.run_policy.get("suspend") or not completion:
            return None
        return float(ttl) - cond.seconds_since(completion)

    def _record_abnormal_pods(self) -> None:
        """Warning events on the job for active pods whose containers crashed or wait with a message."""
        for pod in self.pods:
            if phase(pod) in ("Succeeded", "Failed") or _deleting(pod):
                continue
            name, uid, pod_status = pod["metadata"]["name"], pod["metadata"]["uid"], pod.get("status") or {}
            containers = pod_status.get("containerStatuses") or pod_status.get("initContainerStatuses") or []
            for c in containers:
                state = c.get("state") or {}
                terminated, waiting = state.get("terminated"), state.get("waiting")
                if terminated and terminated.get("exitCode"):
                    message = (
                        f"Error pod {name} container {c['name']} exitCode: {terminated['exitCode']} "
                        f"terminated message: {terminated.get('message', '')}"
                    )
                    self.record_once("Warning", terminated.get("reason", ""), message, uid)
                if waiting and waiting.get("message"):
                    message = f"Error pod {name} container {c['name']} waiting message: {waiting['message']}"
                    self.record_once("Warning", waiting.get("reason", ""), message, uid)
            if containers:
                continue
            latest = max(
                pod_status.get("conditions") or [],
                key=lambda c: c.get("lastTransitionTime", ""),
                default=None,
            )
            if latest and latest.get("status") != "True":
                message = f"Error pod {name} condition message: {latest.get('message', '')}"
                self.record_once("Warning", latest.get("reason", ""), message, uid)

    def _exceeded_limit(self) -> str | None:
        """The backoffLimit / activeDeadlineSeconds failure message, if one applies now."""
        job, status = self.job, self.status
        limit = job.run_policy.get("backoffLimit")
        if limit is not None:
            active = [p for p in self.pods if phase(p) not in ("Succeeded", "Failed") and not _deleting(p)]
            failed = sum(1 for p in self.pods if phase(p) == "Failed")
            previous = sum(cond.count(status, t, "failed") for t in status.get("replicaStatuses") or {})
            new_failure_exceeds = failed > previous and len(active) != job.total_replicas and int(limit) < 1
            if new_failure_exceeds or self._past_backoff_limit(int(limit)):
                return f"Job {job.name} has failed because it has reached the specified backoff limit"
        deadline, start = job.run_policy.get("activeDeadlineSeconds"), status.get("startTime")
        if deadline is not None and start and cond.seconds_since(start) >= float(deadline):
            return f"Job {job.name} has failed because it was active longer than specified deadline"
        return None

    def _past_backoff_limit(self, limit: int) -> bool:
        """Container restarts summed over Running pods of restarting replicas (OnFailure/Always/ExitCode)."""
        restarts = 0
        for rtype in self.job.specs:
            if self.job.restart_policy(rtype) not in ("OnFailure", "Always", "ExitCode"):
                continue
            for pod in of_type(self.pods, rtype):
                if phase(pod) != "Running":
                    continue
                pod_status = pod.get("status") or {}
                for c in (pod_status.get("initContainerStatuses") or []) + (
                    pod_status.get("containerStatuses") or []
                ):
                    restarts += int(c.get("restartCount") or 0)
        return restarts > 0 if limit == 0 else restarts >= limit

    def delete_pods_and_services(self) -> None:
        """Delete pods and their same-named Services: all while the job runs, else per cleanPodPolicy."""
        finished, policy = cond.is_finished(self.status), self.job.run_policy.get("cleanPodPolicy")
        if finished and policy == "None":
            return
        for pod in self.pods:
            if finished and policy == "Running" and phase(pod) not in ("Running", "Pending"):
                continue
            self.delete(PODS, pod["metadata"]["name"])
            if any(s["metadata"]["name"] == pod["metadata"]["name"] for s in self.services):
                self.delete(SERVICES, pod["metadata"]["name"])

    # -- replicas ------------------------------------------------------------------------------------------
    def reconcile_pods(self, rtype: str) -> None:
        counters = cond.reset_replica_status(self.status, rtype)
        replicas = self.job.replicas(rtype)
        slices = by_index(of_type(self.pods, rtype))
        for index in range(max([replicas, *(i + 1 for i in slices)])):
            pods = slices.get(index, [])
            if not pods:
                if index < replicas:
                    self.create(PODS, self.new_pod(rtype, index))
                continue
            if len(pods) > 1:
                continue
            pod = pods[0]
            if index >= replicas:
                self.delete(PODS, pod["metadata"]["name"])
            self.check_failed_pod(rtype, pod)
            pod_phase = phase(pod)
            if pod_phase == "Running":
                counters["failed" if _deleting(pod) else "active"] += 1
            elif pod_phase in ("Succeeded", "Failed"):
                counters[pod_phase.lower()] += 1

    def check_failed_pod(self, rtype: str, pod: dict) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        exit_code = default_exit_code(pod, self.job)
        if exit_code != 0xBEEF:
            message = f"Pod: {self.job.namespace}.{name} exited with code {exit_code}"
            self.record_once("Normal", "ExitedWithCode", message, uid)
        if phase(pod) != "Failed":
            return
        policy = self.job.restart_policy(rtype)
        if policy in ("OnFailure", "Always") or (policy == "ExitCode" and exit_code >= 128):
            self.delete(PODS, name)
            message = f"job {self.job.name} is restarting because {rtype} replica(s) failed."
            self.record("Warning", self.reason("Restarting"), message)
            cond.set_condition(self.status, cond.RESTARTING, "True", self.reason("Restarting"), message)
        elif policy == "ExitCode":
            message = f'job "{self.job.name}" is failing because "{rtype}" replica(s) failed.'
            self.record("Warning", self.reason("Failed"), message)
            cond.finish(self.status, cond.FAILED, self.reason("Failed"), message)

    def new_pod(self, rtype: str, index: int, *, name: str | None = None) -> dict:
        """A replica pod from its template: labels, env, restartPolicy and the owner reference."""
        job = self.job
        template = copy.deepcopy(job.specs[rtype].get("template") or {})
        template.setdefault("spec", {})
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            **job.replica_labels(rtype, index),
        }
        if self.kind.master_role(job, rtype, index):
            labels[JOB_ROLE] = "master"
        if self.kind.inject_env is not None:
            self.kind.inject_env(job, template, rtype, index)
        self.set_restart_policy(template, rtype)
        metadata: dict[str, Any] = {
            "name": name or job.pod_name(rtype, index),
            "namespace": job.namespace,
            "labels": labels,
            "ownerReferences": [job.owner_reference()],
        }
        annotations = (template.get("metadata") or {}).get("annotations")
        if annotations:
            metadata["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}

    def set_restart_policy(self, template: dict, rtype: str) -> None:
        if template["spec"].get("restartPolicy"):
            self.record("Warning", "SettedPodTemplateRestartPolicy", TEMPLATE_RESTART_POLICY)
        policy = self.job.restart_policy(rtype)
        template["spec"]["restartPolicy"] = "Never" if policy == "ExitCode" else policy

    def reconcile_services(self, rtype: str) -> None:
        replicas = self.job.replicas(rtype)
        slices = by_index(of_type(self.services, rtype))
        for index in range(max([replicas, *(i + 1 for i in slices)])):
            services = slices.get(index, [])
            if not services and index < replicas:
                self.create(SERVICES, self.new_service(rtype, index))
            elif len(services) == 1 and index >= replicas:
                self.delete(SERVICES, services[0]["metadata"]["name"])

    def new_service(self, rtype: str, index: int) -> dict:
        """The headless Service named like the pod, exposing the default container's ports."""
        job = self.job
        labels = job.replica_labels(rtype, index)
        ports = [{"name": name, "port": port} for name, port in sorted(job.ports(rtype).items())]
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": job.pod_name(rtype, index),
                "namespace": job.namespace,
                "labels": labels,
                "ownerReferences": [job.owner_reference()],
            },
            "spec": {"clusterIP": "None", "selector": labels, "ports": ports},
        }


def _deleting(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))

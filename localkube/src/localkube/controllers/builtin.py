"""The kube-controller-manager parts the legacy training APIs rely on: batch/v1 Job and apps/v1 ReplicaSet.

The EDL controller and the mlkube MXNet operator create batch Jobs and ReplicaSets and leave the pods to
Kubernetes; these two controllers play that part. Like the real ones they only create and delete pods (the
pod runtime, the kubelet's part, runs them) and write the owner's `.status`:

- **Job**: pods from `spec.template` named `<job>-<5 random>`, labelled `controller-uid`/`job-name` (and their
  `batch.kubernetes.io/` forms, as since Kubernetes 1.27) with a controller ownerReference; `parallelism`
  active pods at most, `completions` successes (without `completions`: done once any pod succeeded and
  the others finished, no new pods after the first success); `backoffLimit` (default 6; failed pods, plus
  container restarts under `restartPolicy: OnFailure`); `activeDeadlineSeconds`; status `active`/`ready`/
  `succeeded`/`failed`/`startTime`/`completionTime` and a `Complete` or `Failed` condition (reasons
  `CompletionsReached`, `BackoffLimitExceeded`, `DeadlineExceeded`). A changed `parallelism` is followed
  at once; `spec.suspend` deletes the active pods (`Suspended`, `JobSuspended`; `JobResumed` after).
  `completionMode: Indexed`: one pod per index `0..completions-1` (`parallelism` at once, lowest
  first) named `<job>-<index>-<5 random>`, with the label and annotation
  `batch.kubernetes.io/job-completion-index`, hostname `<job>-<index>` (the template's `subdomain`
  kept), env `JOB_COMPLETION_INDEX` from that label appended to each container that lacks it; complete
  once every index has a succeeded pod (`completedIndexes`, e.g. `0-2,5`); a failed index gets a new pod
  while `backoffLimit` allows (failed pods counted as the real Job does; no `backoffLimitPerIndex`).
- **ReplicaSet**: `replicas` pods named `<rs>-<5 random>` with the template's labels and an ownerReference;
  status `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`, `observedGeneration`.

Simplified: no pod-creation backoff delay after failures and no slow-start batches; the apiserver's Job
defaulting (`spec.selector`, template labels) is not written back: pods are matched by their controller
ownerReference. Succeeded/failed counters never go down, so pods deleted after they finished stay counted;
a pod deleted as it fails, before this controller saw it Failed, is not counted (the real controller
counts it through its finalizer), nor are pods that failed while it did not run.

The helpers at the end are shared by localkube's legacy-API controllers (EDL, legacy MXNet, T9k).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from localkube.controllers.conditions import seconds_since
from localkube.controllers.kubeflow import controller_ref, phase
from localkube.controllers.loop import ReconcileLoop
from localkube.events import record_event
from localkube.resources import BATCH_JOBS, PODS, REPLICASETS, ResourceType
from localkube.runtime.script import (
    ANNOTATION,
    ScriptError,
    parse_script,
    registered_script,
)
from localkube.store import ApiError, WatchEvent, now_rfc3339

if TYPE_CHECKING:
    from localkube.api import ClusterApi

OwnerKey = tuple[str, str]  # namespace, name
JOB_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
DEFAULT_BACKOFF_LIMIT = 6
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"
COMPLETE_MESSAGE = "Reached expected number of succeeded pods"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_FIELD = f"metadata.labels['{COMPLETION_INDEX}']"  # PodIndexLabel, GA in 1.32: the label


class WorkloadController(ReconcileLoop):
    """Reconciles one built-in owner type on its own changes and on changes of the pods it controls."""

    owner_type: ResourceType

    def initial_keys(self) -> list[Hashable]:
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in self.store.list(self.owner_type)]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if event.rt == self.owner_type:
            return [] if event.type == "DELETED" else [(meta["namespace"], meta["name"])]
        if event.rt == PODS:
            ref = controller_ref(event.object)
            if ref and (ref.get("apiVersion"), ref.get("kind")) == (
                self.owner_type.api_version,
                self.owner_type.kind,
            ):
                return [(meta["namespace"], ref["name"])]
        return []

    def reconcile(self, key: Any) -> float | None:
        owner = get_live(self.store, self.owner_type, *key)
        if owner is None:
            return None
        return self.sync(owner, owned_pods(self.store, owner))

    def sync(self, owner: dict, pods: list[dict]) -> float | None:
        raise NotImplementedError

    def write_status(self, owner: dict, status: dict) -> None:
        if status != (owner.get("status") or {}):
            meta = owner["metadata"]
            self.store.update_status(self.owner_type, meta["namespace"], meta["name"], status)


class BatchJobController(WorkloadController):
    """The batch/v1 Job controller."""

    owner_type = BATCH_JOBS

    def sync(self, job: dict, pods: list[dict]) -> float | None:
        spec, status = job.get("spec") or {}, copy.deepcopy(job.get("status") or {})
        if finished_condition(status):
            return None
        if self._suspension(job, spec, status, pods):
            return None
        status.setdefault("startTime", now_rfc3339())
        completions = spec.get("completions")
        if completions is None and spec.get("parallelism") is None:
            completions = 1  # the apiserver's default for a non-parallel Job
        parallelism = int(spec.get("parallelism", 1))
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        active = [p for p in pods if is_active(p)]
        done = _completed_indexes(status, pods) if indexed else set()
        if indexed:
            if done:
                status["completedIndexes"] = format_indexes(done)
            succeeded = len(done)
        else:
            succeeded = max(int(status.get("succeeded") or 0), sum(phase(p) == "Succeeded" for p in pods))
        failed = max(int(status.get("failed") or 0), sum(phase(p) == "Failed" for p in pods))
        failure = self._failure(spec, status, active, failed)
        if failure is not None:
            for pod in active:  # counted as failed, as Kubernetes counts the pods a failed Job deletes
                delete_quietly(self.store, PODS, pod)
            failed += len(active)
            active = []
        elif indexed:
            active = self._scale_indexed(job, active, done, int(completions or 0), parallelism)
        elif completions is None and succeeded:
            pass  # work-queue Job: no new pods after a success; the others finish on their own
        else:
            want = parallelism if completions is None else min(parallelism, int(completions) - succeeded)
            active = self._scale(job, active, max(want, 0))
        status.update(active=len(active), ready=sum(is_ready(p) for p in active))
        status.update(succeeded=succeeded, failed=failed)
        complete = succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
        if failure is not None:
            add_condition(status, "Failed", *failure)
        elif complete:
            for pod in active:
                delete_quietly(self.store, PODS, pod)
            status["active"] = status["ready"] = 0
            status["completionTime"] = now_rfc3339()
            add_condition(status, "Complete", "CompletionsReached", COMPLETE_MESSAGE)
        self.write_status(job, _without_zero_counters(status))
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is None or finished_condition(status):
            return None
        return max(float(deadline) - seconds_since(status["startTime"]), 0.0) + 0.01

    def _suspension(self, job: dict, spec: dict, status: dict, pods: list[dict]) -> bool:
        """`spec.suspend`: delete the active pods, `Suspended=True` (`JobSuspended`), no start time; resuming
        turns the condition False (`JobResumed`). Whether the Job is suspended (nothing else to do)."""
        suspended = next((c for c in status.get("conditions") or [] if c.get("type") == "Suspended"), None)
        if not spec.get("suspend"):
            if suspended is not None and suspended.get("status") == "True":
                suspended.update(status="False", reason="JobResumed", message="Job resumed")
                suspended["lastTransitionTime"] = now_rfc3339()
            return False
        for pod in pods:
            if is_active(pod):
                delete_quietly(self.store, PODS, pod)
        status.update(active=0, ready=0)
        status.pop("startTime", None)
        if suspended is None or suspended.get("status") != "True":
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Suspended"]
            add_condition(status, "Suspended", "JobSuspended", "Job suspended")
        self.write_status(job, _without_zero_counters(status))
        return True

    @staticmethod
    def _failure(spec: dict, status: dict, active: list[dict], failed: int) -> tuple[str, str] | None:
        limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
        restarts = sum(restart_count(p) for p in active) if policy == "OnFailure" else 0
        if failed > limit or (policy == "OnFailure" and (restarts > 0 if limit == 0 else restarts >= limit)):
            return "BackoffLimitExceeded", BACKOFF_MESSAGE
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and seconds_since(status["startTime"]) >= float(deadline):
            return "DeadlineExceeded", DEADLINE_MESSAGE
        return None

    def _scale(self, job: dict, active: list[dict], want: int) -> list[dict]:
        for _ in range(want - len(active)):
            active.append(self._create_pod(job))
        excess = sorted(active, key=lambda p: (phase(p) == "Running", p["metadata"]["creationTimestamp"]))
        for pod in excess[: max(len(active) - want, 0)]:
            delete_quietly(self.store, PODS, pod)
            active.remove(pod)
        return active

    def _scale_indexed(
        self, job: dict, active: list[dict], done: set[int], completions: int, parallelism: int
    ) -> list[dict]:
        """`completionMode: Indexed`: one pod per index not succeeded yet, lowest first, `parallelism` at
        most; a pod of an index that succeeded meanwhile (or out of range) goes."""
        running: dict[int, dict] = {}
        for pod in active:
            index = pod_completion_index(pod)
            if index is None or index in done or index >= completions or index in running:
                delete_quietly(self.store, PODS, pod)
            else:
                running[index] = pod
        missing = [i for i in range(completions) if i not in done and i not in running]
        for index in missing[: max(parallelism - len(running), 0)]:
            running[index] = self._create_pod(job, index)
        return list(running.values())

    def _create_pod(self, job: dict, index: int | None = None) -> dict:
        meta = job["metadata"]
        labels = {
            **dict.fromkeys(JOB_LABELS, meta["uid"]),
            **dict.fromkeys(JOB_NAME_LABELS, meta["name"]),
        }
        template = (job.get("spec") or {}).get("template") or {}
        if index is None:
            return create_pod(self.store, job, template, labels, component="job-controller")
        template = copy.deepcopy(template)
        labels[COMPLETION_INDEX] = str(index)
        tmeta = template.setdefault("metadata", {})
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), COMPLETION_INDEX: str(index)}
        pod_spec = template.setdefault("spec", {})
        pod_spec["hostname"] = f"{meta['name']}-{index}"
        index_env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}
        for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
            env = container.setdefault("env", [])
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                env.append(copy.deepcopy(index_env))
        return create_pod(
            self.store, job, template, labels, component="job-controller", prefix=f"{meta['name']}-{index}-"
        )


class ReplicaSetController(WorkloadController):
    """The apps/v1 ReplicaSet controller."""

    owner_type = REPLICASETS

    def sync(self, rs: dict, pods: list[dict]) -> float | None:
        spec = rs.get("spec") or {}
        want = int(spec.get("replicas", 1))
        active = [p for p in pods if not deleting(p) and phase(p) not in ("Succeeded", "Failed")]
        for _ in range(want - len(active)):
            template = spec.get("template") or {}
            active.append(create_pod(self.store, rs, template, {}, component="replicaset-controller"))
        doomed = sorted(active, key=lambda p: (phase(p) == "Running", is_ready(p)))[
            : max(len(active) - want, 0)
        ]
        for pod in doomed:
            delete_quietly(self.store, PODS, pod)
            active.remove(pod)
        ready = sum(is_ready(p) for p in active)
        status = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(active),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        self.write_status(rs, _without_zero_counters(status, keep=("replicas",)))
        return None


# -- helpers shared by the legacy-API controllers -----------------------------------------------------------
def owner_reference(owner: dict) -> dict:
    """A controller ownerReference to `owner` (blocking its foreground deletion, as controllers set it)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_pods(store: ClusterApi, owner: dict) -> list[dict]:
    """The pods whose controller is `owner`, oldest first."""
    uid = owner["metadata"]["uid"]
    pods = [
        p
        for p in store.list(PODS, owner["metadata"]["namespace"])
        if (controller_ref(p) or {}).get("uid") == uid
    ]
    return sorted(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))


def create_pod(
    store: ClusterApi,
    owner: dict,
    template: dict,
    labels: dict[str, str],
    *,
    component: str,
    name: str | None = None,
    prefix: str | None = None,
) -> dict:
    """A pod from a pod template, controlled by `owner`; named `<owner>-<5 random>` (`<prefix><5 random>`)
    unless `name` is given.

    When the API refuses it (a template without containers: 422), the Warning event `FailedCreate`
    ("Error creating: <the API's message>") goes on the owner, as from Kubernetes' controllers, and the
    error is raised: the reconcile loop tries again with backoff and no pod is stored."""
    template = copy.deepcopy(template)
    tmeta = template.get("metadata") or {}
    metadata: dict[str, Any] = {
        "labels": {**(tmeta.get("labels") or {}), **labels},
        "ownerReferences": [owner_reference(owner)],
    }
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = prefix or f"{owner['metadata']['name']}-"
    if tmeta.get("annotations"):
        metadata["annotations"] = tmeta["annotations"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
    try:
        return store.create(PODS, owner["metadata"]["namespace"], pod)
    except ApiError as exc:
        if exc.code != 409:
            record_event(store, owner, "Warning", "FailedCreate", f"Error creating: {exc.message}", component)
        raise


def served(store: ClusterApi, rt: ResourceType) -> bool:
    """Whether the cluster serves `rt` (a custom type: its CRD loaded)."""
    key = (rt.group, rt.version, rt.plural)
    return any((t.group, t.version, t.plural) == key for t in store.resource_types())


def same_type(a: ResourceType, b: ResourceType) -> bool:
    return (a.group, a.version, a.plural) == (b.group, b.version, b.plural)


def get_live(store: ClusterApi, rt: ResourceType, namespace: str, name: str) -> dict | None:
    """The object to reconcile, or None when it is gone or being deleted."""
    try:
        obj = store.get(rt, namespace, name)
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return None if deleting(obj) else obj


def create_quietly(store: ClusterApi, rt: ResourceType, namespace: str, obj: dict) -> dict | None:
    """Create `obj`; None if it exists already (a controller that lost the race sees it on the next pass)."""
    try:
        return store.create(rt, namespace, obj)
    except ApiError as exc:
        if exc.code != 409:
            raise
        return None


def delete_quietly(store: ClusterApi, rt: ResourceType, obj: dict) -> None:
    """Delete `obj` unless it is gone already."""
    try:
        store.delete(rt, obj["metadata"]["namespace"], obj["metadata"]["name"])
    except ApiError as exc:
        if exc.code != 404:
            raise


def deleting(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_active(pod: dict) -> bool:
    return not deleting(pod) and phase(pod) not in ("Succeeded", "Failed")


def is_ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def restart_count(pod: dict) -> int:
    status = pod.get("status") or {}
    containers = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return sum(int(c.get("restartCount") or 0) for c in containers)


def finished_condition(status: dict) -> str | None:
    """`Complete` or `Failed` if the Job has that condition True."""
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def add_condition(status: dict, type_: str, reason: str, message: str) -> None:
    now = now_rfc3339()
    status.setdefault("conditions", []).append(
        {
            "type": type_,
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )


def pod_completion_index(pod: dict) -> int | None:
    """An Indexed Job's pod's index (its annotation, as the Job controller reads it), None if unreadable."""
    meta = pod["metadata"]
    value = (meta.get("annotations") or {}).get(
        COMPLETION_INDEX, (meta.get("labels") or {}).get(COMPLETION_INDEX)
    )
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _completed_indexes(status: dict, pods: list[dict]) -> set[int]:
    """The indexes with a succeeded pod, now or before (`status.completedIndexes`: pods may be gone)."""
    done = parse_indexes(status.get("completedIndexes") or "")
    done.update(i for p in pods if phase(p) == "Succeeded" and (i := pod_completion_index(p)) is not None)
    return done


def parse_indexes(text: str) -> set[int]:
    """`"0-2,5"` as {0, 1, 2, 5}."""
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


def format_indexes(indexes: set[int]) -> str:
    """{0, 1, 2, 5} as `"0-2,5"`, as the Job controller writes `completedIndexes`."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _without_zero_counters(status: dict, keep: Iterable[str] = ("ready",)) -> dict:
    """Go's `omitempty` on the int32 counters (pointer fields such as Job `ready` keep their zero)."""
    kept = set(keep)
    return {k: v for k, v in status.items() if not (v == 0 and k not in kept)}


def folded_script(owner: dict, selectors: Iterable[str], override: dict | None = None) -> str | None:
    """The owner's scripted timeline for one of its pods, as an annotation value for the pod template.

    The scripted runtime picks steps by the pod's `...replica-type`/`...replica-index` labels and follows
    controller ownerReferences to find the job's script. The legacy APIs label their pods otherwise (or,
    EDL, own them through children without ownerReferences), so their controllers put the script on the pod
    itself with the steps of `selectors` (the replica type, then `<type>-<index>`) merged into `default`.
    `override` replaces the resulting default step (debug mode: sleep until deleted). The script is the
    owner's annotation, else one registered for its name; an unparsable one is passed on for the runtime
    to report.
    """
    meta = owner["metadata"]
    text = (meta.get("annotations") or {}).get(ANNOTATION)
    try:
        script = parse_script(text) if text else registered_script(meta["namespace"], meta["name"])
    except ScriptError:
        return text
    if script is None and override is None:
        return None
    lowered = {str(k).lower(): v for k, v in (script or {}).items()}
    names = ["default", *(s.lower() for s in selectors)]
    merged: dict[str, Any] = {}
    for selector in names:
        merged.update(lowered.pop(selector, None) or {})
    if override is not None:
        merged = {k: v for k, v in merged.items() if k not in ("attempts", "containers")} | override
    return json.dumps({**lowered, "default": merged})


def with_script(template: dict, script: str | None) -> dict:
    """The pod template with the script annotation set (a copy), or unchanged without a script."""
    if script is None:
        return template
    template = copy.deepcopy(template)
    template.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION] = script
    return template

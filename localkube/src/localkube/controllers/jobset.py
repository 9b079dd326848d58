"""JobSet (`jobset.x-k8s.io/v1alpha2`, kubernetes-sigs/jobset v0.12.0: what Kubeflow Trainer v2.3.0 uses).

Served when its CRD is loaded (`crd_dir`: tests/fixtures/crds/jobset.x-k8s.io-v1alpha2, upstream's
unchanged); this controller idles otherwise. It follows upstream's `pkg/controllers` (reasons and messages
are upstream's) and applies its webhook's defaults when reading a JobSet (not written back):
`successPolicy` All, `startupPolicy` AnyOrder, `network.enableDNSHostnames` and `publishNotReadyAddresses`
true, per replicated job `replicas` 1, `completionMode: Indexed`, `restartPolicy: OnFailure`.

- **Jobs**: per replicated job `replicas` batch Jobs `<jobset>-<rjob>-<jobIndex>`, controlled by the JobSet,
  their pods run by the batch Job controller. Job and pod template get the JobSet labels and annotations
  (`jobset-name`, `jobset-uid`, `replicatedjob-name`, `replicatedjob-replicas`, `global-replicas`,
  `job-index`, `job-key`, `job-global-index`, `restart-attempt`, `group-name`, `group-replicas`,
  `job-group-index`); the pod template `subdomain` (the
  network's `subdomain`, default the JobSet's name) when DNS hostnames are enabled, and then a headless
  Service of that name selecting `jobset-name`. `dependsOn` (`Ready`/`Complete` of an earlier replicated
  job) and `startupPolicy: InOrder` (a replicated job's Jobs once the previous one's are all ready) gate
  creation.
- **Status**: `replicatedJobsStatus` [{name, ready, succeeded, failed, active, suspended}] counting Jobs
  (ready: its succeeded plus ready pods reach min(parallelism, completions)), in spec order; `restarts`,
  `restartsCountTowardsMax`, `terminalState`; conditions `Completed` (`AllJobsCompleted`, when
  `successPolicy` All/Any over `targetReplicatedJobs` is met), `Failed`, `Suspended`
  (`SuspendedJobs`/`ResumeJobs`), `RestartingJobSet`, `StartupPolicyInProgress`/`Completed` (InOrder).
- **Failure**: a failed child Job without `failurePolicy` fails the JobSet (`FailedJobs`, "jobset failed
  due to one or more job failures (first failed job: <job>)"). With one, the first rule matching the
  failed Job (`onJobFailureReasons`, `targetReplicatedJobs`, `onJobFailureMessagePatterns`) decides, else
  `RestartJobSet`: `FailJobSet` fails it (`FailJobSetFailurePolicyAction`); `RestartJobSet` recreates every
  Job (`status.restarts` + 1; the Jobs of an older `restart-attempt` are deleted and made anew) until
  `restartsCountTowardsMax` reaches `maxRestarts`, then `ReachedMaxRestarts`;
  `RestartJobSetAndIgnoreMaxRestarts` restarts without counting. Once finished, active Jobs are deleted.
- **Suspend**: `spec.suspend` suspends the active Jobs (their pods go), new Jobs are created suspended;
  resuming unsuspends them.

Simplified: no `RestartJob` actions (treated as `RestartJobSet`), no `BlockingRecreate` wait, no in-place
restart, coordinator, exclusive placement, volume claim policies, TTL or `managedBy` handling. The webhook's
defaults are applied by the controller, after the CRD's validation: a failure policy rule without the `name`
the webhook would default (`failurePolicyRule<i>`) is refused by the CRD schema.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from localkube.controllers.builtin import (
    create_quietly,
    delete_quietly,
    finished_condition,
    get_live,
    owner_reference,
    same_type,
    served,
)
from localkube.controllers.kubeflow import controller_ref
from localkube.controllers.loop import ReconcileLoop
from localkube.events import record_event
from localkube.resources import BATCH_JOBS, SERVICES, ResourceType
from localkube.store import ApiError, WatchEvent, now_rfc3339

if TYPE_CHECKING:
    from localkube.api import ClusterApi

JOBSETS = ResourceType("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", "jobset")
PREFIX = "jobset.sigs.k8s.io/"
JOBSET_NAME = PREFIX + "jobset-name"
JOBSET_UID = PREFIX + "jobset-uid"
REPLICATED_JOB = PREFIX + "replicatedjob-name"
REPLICATED_JOB_REPLICAS = PREFIX + "replicatedjob-replicas"
GLOBAL_REPLICAS = PREFIX + "global-replicas"
JOB_INDEX = PREFIX + "job-index"
JOB_KEY = PREFIX + "job-key"
JOB_GLOBAL_INDEX = PREFIX + "job-global-index"
RESTART_ATTEMPT = PREFIX + "restart-attempt"
GROUP_NAME = PREFIX + "group-name"  # a replicated job's groupName (CRD default "default")
GROUP_REPLICAS = PREFIX + "group-replicas"
JOB_GROUP_INDEX = PREFIX + "job-group-index"
DEFAULT_GROUP = "default"
COMPONENT = "jobset-controller"

COMPLETED, FAILED, SUSPENDED = "Completed", "Failed", "Suspended"
RESTARTING = "RestartingJobSet"
STARTUP_IN_PROGRESS, STARTUP_COMPLETED = "StartupPolicyInProgress", "StartupPolicyCompleted"
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_ACTION = ("RestartJobSetFailurePolicyAction", "applying RestartJobSet failure policy action")
RESTART_IGNORING_ACTION = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
)
ALL_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
SUSPENDED_JOBS = ("SuspendedJobs", "jobset is suspended")
RESUMED_JOBS = ("ResumeJobs", "jobset is resumed")
IN_ORDER_IN_PROGRESS = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
IN_ORDER_COMPLETED = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")
EXCLUSIVE = {COMPLETED: FAILED, FAILED: COMPLETED, STARTUP_IN_PROGRESS: STARTUP_COMPLETED}
EXCLUSIVE.update({v: k for k, v in EXCLUSIVE.items()})


class JobSetController(ReconcileLoop):
    """Reconciles JobSets on their own changes and their child Jobs'."""

    def initial_keys(self) -> list[Hashable]:
        if not served(self.store, JOBSETS):
            return []
        return [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in self.store.list(JOBSETS)]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if same_type(event.rt, JOBSETS):
            return [] if event.type == "DELETED" else [(meta["namespace"], meta["name"])]
        ref = controller_ref(event.object) if event.rt == BATCH_JOBS else None
        if ref and ref.get("apiVersion") == JOBSETS.api_version and ref.get("kind") == JOBSETS.kind:
            return [(meta["namespace"], ref["name"])]
        return []

    def reconcile(self, key: Any) -> float | None:
        js = get_live(self.store, JOBSETS, *key)
        if js is not None:
            _JobSet(self.store, js).sync()
        return None


class _JobSet:
    """One reconcile of one JobSet."""

    def __init__(self, store: ClusterApi, js: dict) -> None:
        self.store, self.js = store, js
        self.name, self.namespace = js["metadata"]["name"], js["metadata"]["namespace"]
        self.spec = defaulted(js.get("spec") or {})
        self.status: dict[str, Any] = dict(js.get("status") or {})
        self.status.setdefault("restarts", 0)
        self.conditions: list[dict] = [dict(c) for c in self.status.get("conditions") or []]
        self.events: list[tuple[str, str, str]] = []

    def sync(self) -> None:
        active, successful, failed, previous = self._children()
        self.status["replicatedJobsStatus"] = self._statuses(active, successful, failed)
        if self._finished():
            for job in active:
                delete_quietly(self.store, BATCH_JOBS, job)
            return self._write()
        for job in previous:
            delete_quietly(self.store, BATCH_JOBS, job)
        if not self.spec.get("suspend") and self._all_ready():
            self._restarting_false("JobsReady", "all jobs are ready")
        if failed:
            self._on_failure(failed)
        elif not (successful and self._succeeded(successful)):
            self._ensure_service()
            self._ensure_jobs(active + successful + failed + previous)
            if self.spec.get("suspend"):
                self._suspend(active)
            else:
                self._resume(active)
        self._write()

    # -- children ------------------------------------------------------------------------------------------
    def _children(self) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
        uid = self.js["metadata"]["uid"]
        active: list[dict] = []
        successful: list[dict] = []
        failed: list[dict] = []
        previous: list[dict] = []
        for job in self.store.list(BATCH_JOBS, self.namespace):
            if (controller_ref(job) or {}).get("uid") != uid:
                continue
            attempt = int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT) or 0)
            if attempt < int(self.status["restarts"]):
                previous.append(job)
                continue
            done = finished_condition(job.get("status") or {})
            (failed if done == "Failed" else successful if done == "Complete" else active).append(job)
        return active, successful, failed, previous

    def _statuses(self, active: list[dict], successful: list[dict], failed: list[dict]) -> list[dict]:
        counts = {
            r["name"]: dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)
            for r in self.spec["replicatedJobs"]
        }

        def entry(job: dict) -> dict | None:
            return counts.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB, ""))

        for job in active:
            if (found := entry(job)) is None:
                continue
            spec, status = job.get("spec") or {}, job.get("status") or {}
            pods = int(spec.get("parallelism", 1))
            if spec.get("completions") is not None:
                pods = min(pods, int(spec["completions"]))
            found["ready"] += int(status.get("succeeded") or 0) + int(status.get("ready") or 0) >= pods
            found["active"] += int(status.get("active") or 0) > 0
            found["suspended"] += bool(spec.get("suspend"))
        for jobs, field in ((successful, "succeeded"), (failed, "failed")):
            for job in jobs:
                if (found := entry(job)) is not None:
                    found[field] += 1
        return [{"name": name, **c} for name, c in counts.items()]

    def _job_name(self, rjob: dict, index: int) -> str:
        return f"{self.name}-{rjob['name']}-{index}"

    def _ensure_jobs(self, existing: list[dict]) -> None:
        names = {j["metadata"]["name"] for j in existing}
        in_order = (self.spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        suspended = bool(self.spec.get("suspend"))
        for rjob in self.spec["replicatedJobs"]:
            if not self._dependencies_met(rjob):
                continue
            status = self._rjob_status(rjob["name"])
            if not suspended and in_order and status["ready"] + status["succeeded"] >= rjob["replicas"]:
                continue  # started: move on to the next one
            for index in range(int(rjob["replicas"])):
                if self._job_name(rjob, index) not in names:
                    create_quietly(self.store, BATCH_JOBS, self.namespace, self._job(rjob, index))
            if not suspended and in_order:
                self._set(STARTUP_IN_PROGRESS, "True", *IN_ORDER_IN_PROGRESS)
                return
        if not suspended and in_order:
            self._set(STARTUP_COMPLETED, "True", *IN_ORDER_COMPLETED)

    def _dependencies_met(self, rjob: dict) -> bool:
        replicas = {r["name"]: int(r["replicas"]) for r in self.spec["replicatedJobs"]}
        for dependency in rjob.get("dependsOn") or []:
            status = self._rjob_status(dependency.get("name", ""))
            want = replicas.get(dependency.get("name", ""), 0)
            if dependency.get("status") == "Complete" and status["succeeded"] != want:
                return False
            if (
                dependency.get("status") == "Ready"
                and status["failed"] + status["ready"] + status["succeeded"] != want
            ):
                return False
        return True

    def _rjob_status(self, name: str) -> dict:
        zero = {"name": name, **dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)}
        return next((s for s in self.status["replicatedJobsStatus"] if s["name"] == name), zero)

    def _job(self, rjob: dict, index: int) -> dict:
        template = rjob.get("template") or {}
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        pod_template = spec.setdefault("template", {})
        labels, annotations = self._marks(rjob, index)
        pmeta = pod_template.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **labels}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **annotations}
        if dns_hostnames(self.spec):
            pod_template.setdefault("spec", {})["subdomain"] = self._subdomain()
        spec["suspend"] = bool(self.spec.get("suspend"))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": self._job_name(rjob, index),
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": {**(tmeta.get("annotations") or {}), **annotations},
                "ownerReferences": [owner_reference(self.js)],
            },
            "spec": spec,
        }

    def _marks(self, rjob: dict, index: int) -> tuple[dict[str, str], dict[str, str]]:
        """The labels (and, the same, annotations) upstream's `labelAndAnnotateObject` sets."""
        rjobs = self.spec["replicatedJobs"]
        group = str(rjob.get("groupName") or DEFAULT_GROUP)
        offset = group_offset = 0
        for other in rjobs:
            if other["name"] == rjob["name"]:
                break
            offset += int(other["replicas"])
            if str(other.get("groupName") or DEFAULT_GROUP) == group:
                group_offset += int(other["replicas"])
        group_replicas = sum(
            int(r["replicas"]) for r in rjobs if str(r.get("groupName") or DEFAULT_GROUP) == group
        )
        job_name = self._job_name(rjob, index)
        marks = {
            JOBSET_NAME: self.name,
            JOBSET_UID: self.js["metadata"]["uid"],
            REPLICATED_JOB: rjob["name"],
            RESTART_ATTEMPT: str(self.status["restarts"]),
            REPLICATED_JOB_REPLICAS: str(rjob["replicas"]),
            GLOBAL_REPLICAS: str(sum(int(r["replicas"]) for r in rjobs)),
            JOB_INDEX: str(index),
            JOB_KEY: hashlib.sha1(f"{self.namespace}/{job_name}".encode()).hexdigest(),
            JOB_GLOBAL_INDEX: str(offset + index),
            GROUP_NAME: group,
            GROUP_REPLICAS: str(group_replicas),
            JOB_GROUP_INDEX: str(group_offset + index),
        }
        return marks, dict(marks)

    def _subdomain(self) -> str:
        return str((self.spec.get("network") or {}).get("subdomain") or self.name)

    def _ensure_service(self) -> None:
        if not dns_hostnames(self.spec):
            return
        name = self._subdomain()
        try:
            self.store.get(SERVICES, self.namespace, name)
            return
        except ApiError as exc:
            if exc.code != 404:
                raise
        network = self.spec.get("network") or {}
        service = {
            "metadata": {"name": name, "ownerReferences": [owner_reference(self.js)]},
            "spec": {
                "clusterIP": "None",
                "selector": {JOBSET_NAME: self.name},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        create_quietly(self.store, SERVICES, self.namespace, service)

    # -- decisions -----------------------------------------------------------------------------------------
    def _finished(self) -> bool:
        return any(c["type"] in (COMPLETED, FAILED) and c["status"] == "True" for c in self.conditions)

    def _all_ready(self) -> bool:
        total = sum(int(r["replicas"]) for r in self.spec["replicatedJobs"])
        ready = sum(s["ready"] + s["succeeded"] for s in self.status["replicatedJobsStatus"])
        return total == ready

    def _succeeded(self, successful: list[dict]) -> bool:
        policy = self.spec.get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or []

        def targeted(name: str) -> bool:
            return not targets or name in targets

        matching = sum(
            targeted((j["metadata"].get("labels") or {}).get(REPLICATED_JOB, "")) for j in successful
        )
        if policy.get("operator") == "Any":
            expected = 1
        else:
            expected = sum(int(r["replicas"]) for r in self.spec["replicatedJobs"] if targeted(r["name"]))
        if matching < expected:
            return False
        self._set(COMPLETED, "True", *ALL_COMPLETED, event="Normal")
        self._restarting_false("JobSetCompleted", ALL_COMPLETED[1])
        self.status["terminalState"] = COMPLETED
        return True

    def _on_failure(self, failed: list[dict]) -> None:
        policy = self.spec.get("failurePolicy")
        first = _first_failed(failed) or failed[0]
        if policy is None:
            return self._fail(*FAILED_JOBS, first)
        rule, job = next(
            ((r, j) for r in policy.get("rules") or [] if (j := _first_failed(failed, r)) is not None),
            (None, first),
        )
        job = job or first
        action = (rule or {}).get("action") or "RestartJobSet"
        if action == "FailJobSet":
            return self._fail(*FAIL_ACTION, job)
        ignore_max = action.endswith("AndIgnoreMaxRestarts")
        counted = int(self.status.get("restartsCountTowardsMax") or 0)
        if not ignore_max and counted >= int(policy.get("maxRestarts") or 0):
            return self._fail(*MAX_RESTARTS, job)
        reason, message = RESTART_IGNORING_ACTION if ignore_max else RESTART_ACTION
        message = f"{message} (first failed job: {job['metadata']['name']})"
        self.status["restarts"] = int(self.status["restarts"]) + 1
        if not ignore_max:
            self.status["restartsCountTowardsMax"] = counted + 1
        self.events.append(("Warning", reason, message))
        why = f"FailurePolicy_{rule['name']}" if rule and rule.get("name") else "DefaultFailurePolicy"
        self._set(RESTARTING, "True", why, message, event="Warning")

    def _fail(self, reason: str, message: str, job: dict) -> None:
        self._set(FAILED, "True", reason, f"{message} (first failed job: {job['metadata']['name']})")
        self._restarting_false("JobSetFailed", "jobset failed")
        self.status["terminalState"] = FAILED

    def _suspend(self, active: list[dict]) -> None:
        for job in active:
            if not (job.get("spec") or {}).get("suspend"):
                self._patch_suspend(job, True)
        self._set(SUSPENDED, "True", *SUSPENDED_JOBS, event="Normal")
        self._restarting_false("JobSetSuspended", SUSPENDED_JOBS[1])

    def _resume(self, active: list[dict]) -> None:
        for job in active:
            if (job.get("spec") or {}).get("suspend"):
                self._patch_suspend(job, False)
        self._set(SUSPENDED, "False", *RESUMED_JOBS, event="Normal")

    def _patch_suspend(self, job: dict, value: bool) -> None:
        self.store.patch(
            BATCH_JOBS,
            self.namespace,
            job["metadata"]["name"],
            {"spec": {"suspend": value}},
            "application/merge-patch+json",
        )

    # -- conditions and status -----------------------------------------------------------------------------
    def _restarting_false(self, reason: str, message: str) -> None:
        self._set(RESTARTING, "False", reason, message, event="Normal")

    def _set(self, type_: str, value: str, reason: str, message: str, *, event: str = "Warning") -> None:
        """Upstream's `updateCondition`: a False condition is only written over an existing one; a True one
        turns its exclusive counterpart False."""
        if set_condition(self.conditions, type_, value, reason, message, exclusive=EXCLUSIVE):
            self.events.append((event, reason, message))

    def _write(self) -> None:
        status = {**self.status, "conditions": self.conditions}
        if not status["conditions"]:
            del status["conditions"]
        if status != (self.js.get("status") or {}):
            self.store.update_status(JOBSETS, self.namespace, self.name, status)
        for type_, reason, message in self.events:
            record_event(self.store, self.js, type_, reason, message, COMPONENT)


def set_condition(
    conditions: list[dict],
    type_: str,
    value: str,
    reason: str,
    message: str,
    *,
    exclusive: dict[str, str] | None = None,
    add_false: bool = False,
    time: str | None = None,
) -> bool:
    """Set a metav1.Condition in place: the transition time (`time`, else now) moves only when the status
    changes; a missing False condition is added only with `add_false`. Whether anything changed."""
    now = time or now_rfc3339()
    changed = False
    found = False
    for current in conditions:
        if current["type"] == type_:
            found = True
            if current["status"] != value:
                current.update(status=value, reason=reason, message=message, lastTransitionTime=now)
                changed = True
            elif (current.get("reason"), current.get("message")) != (reason, message):
                current.update(reason=reason, message=message)
                changed = True
        elif (
            (exclusive or {}).get(type_) == current["type"]
            and value == "True"
            and current["status"] == "True"
        ):
            current["status"] = "False"
            changed = True
    if not found and (value == "True" or add_false):
        conditions.append(
            {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": now}
        )
        changed = True
    return changed


def _first_failed(failed: list[dict], rule: dict | None = None) -> dict | None:
    """The failed Job that failed first (of those `rule` applies to)."""

    def failure(job: dict) -> dict:
        return next(c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == "Failed")

    matching = [j for j in failed if rule is None or _rule_applies(rule, j, failure(j))]
    return min(matching, key=lambda j: failure(j).get("lastTransitionTime") or "", default=None)


def _rule_applies(rule: dict, job: dict, failure: dict) -> bool:
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and failure.get("reason") not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    if patterns and not any(re.search(p, failure.get("message") or "") for p in patterns):
        return False
    targets = rule.get("targetReplicatedJobs") or []
    return not targets or (job["metadata"].get("labels") or {}).get(REPLICATED_JOB) in targets


def defaulted(spec: dict) -> dict:
    """The JobSet spec with the webhook's defaults (a copy)."""
    spec = copy.deepcopy(spec)
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for rjob in spec.setdefault("replicatedJobs", []):
        rjob.setdefault("replicas", 1)
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        job_spec.setdefault("template", {}).setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
    return spec


def dns_hostnames(spec: dict) -> bool:
    return bool((spec.get("network") or {}).get("enableDNSHostnames"))

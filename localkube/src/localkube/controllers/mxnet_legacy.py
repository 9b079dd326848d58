"""The two legacy MXNet operators (legacy-mxnet.md B1, B2), which predate `kubeflow.org/v1`.

**`mxnet.mlkube.io/v1beta1` `MxJob`** (deepinsight/mxnet-operator): one batch/v1 Job per replica index,
`<job>-<type>-<RuntimeId>-<index>` (completions = parallelism = 1), labelled `mxnet.mlkube.io=""`,
`job_type`, `runtime_id`, `task_index` (no job-name label); in `dist` mode only the scheduler gets a Service
(ClusterIP, port `ps-root-port`) and the `mxnet` container's first five env entries become the DMLC ones.
Status `phase` Creating → Running → Done with `state` Succeeded/Failed, decided by the SCHEDULER (dist) or the
WORKER (local) replica set; any failed set fails the job. `phase: Failed` only for a setup error.

**`kubeflow.org/v1alpha1` `MXJob`** (kubeflow/mxnet-operator 8d73e16): pods `<job:.40>-<type>-<rid>-<i>-<5
random>` and a headless Service per index, labelled as above with `kubeflow.org=""` and `mx_job_name`; six
DMLC env entries (with `DMLC_USE_KUBERNETES=1`) on every container. Only `terminationPolicy.chief` (default
WORKER 0) decides: Running, then CleanUp with `state` Succeeded/Failed, pods removed per `cleanupPodPolicy`
(default All), then `phase: Done`.

Both write the whole object back (no status subresource), which also persists a generated `RuntimeId`.
A replica's state is its latest pod's `mxnet` container: running or waiting is Running, exit 0 Succeeded, a
retryable exit (>= 128, not OOMKilled; looked up in the last termination while it restarts) Running, any
other Failed. Simplified: reconciles follow events instead of the 8 s interval, except that the v1alpha1
CleanUp step waits `RESYNC` seconds (a scaled-down interval), so clients see the finished state with its
pods first; env lists of one to five entries (a panic upstream) and a missing replica type (an invalid env
entry upstream) are not reproduced.
"""

from __future__ import annotations

import copy
import random
import string
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from localkube.controllers.builtin import (
    create_pod,
    create_quietly,
    delete_quietly,
    folded_script,
    get_live,
    is_active,
    owner_reference,
    with_script,
)
from localkube.controllers.kubeflow import controller_ref, phase
from localkube.controllers.loop import ReconcileLoop
from localkube.resources import BATCH_JOBS, PODS, SERVICES, ResourceType
from localkube.store import ApiError, WatchEvent

SCHEDULER, SERVER, WORKER = "SCHEDULER", "SERVER", "WORKER"
CONTAINER = "mxnet"
PS_ROOT_PORT = 9091
RESYNC = 0.5  # seconds before the v1alpha1 CleanUp step (upstream: the next 8 s reconcile)
_ALPHABET = string.ascii_lowercase + string.digits
UNKNOWN, RUNNING, SUCCEEDED, FAILED = "Unknown", "Running", "Succeeded", "Failed"


@dataclass(frozen=True)
class Lineage:
    """What differs between the two operators' objects."""

    group: str
    version: str
    marker: str  # label with value "" on every child
    name_label: str | None
    env_slots: int
    status_type_key: str
    pods_directly: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


MLKUBE = Lineage("mxnet.mlkube.io", "v1beta1", "mxnet.mlkube.io", None, 5, "Mx_replica_type", False)
KUBEFLOW_V1ALPHA1 = Lineage(
    "kubeflow.org", "v1alpha1", "kubeflow.org", "mx_job_name", 6, "mx_replica_type", True
)
LINEAGES = (MLKUBE, KUBEFLOW_V1ALPHA1)


def rand_string(n: int) -> str:
    return "".join(random.choices(_ALPHABET, k=n))


class MxJob:
    """A legacy job with the operator's defaults: replica type WORKER, 1 replica, PsRootPort 9091."""

    def __init__(self, lineage: Lineage, job: dict) -> None:
        self.lineage, self.raw = lineage, copy.deepcopy(job)
        meta = self.raw["metadata"]
        self.name, self.namespace = meta["name"], meta["namespace"]
        self.spec: dict = self.raw.setdefault("spec", {})
        self.replicas: list[dict] = []
        for given in self.spec.get("replicaSpecs") or []:
            spec = dict(given or {})
            spec["mxReplicaType"] = spec.get("mxReplicaType") or WORKER
            spec["replicas"] = 1 if spec.get("replicas") is None else int(spec["replicas"])
            spec["PsRootPort"] = PS_ROOT_PORT if spec.get("PsRootPort") is None else int(spec["PsRootPort"])
            self.replicas.append(spec)

    @property
    def runtime_id(self) -> str:
        return str(self.spec.get("RuntimeId") or "")

    def of_type(self, rtype: str) -> dict | None:
        return next((r for r in self.replicas if r["mxReplicaType"] == rtype), None)

    def count(self, rtype: str) -> int:
        spec = self.of_type(rtype)
        return int(spec["replicas"]) if spec else 0

    def child_name(self, rtype: str, index: int, *, truncate: bool = False) -> str:
        job = self.name[:40] if truncate else self.name
        return f"{job}-{rtype.lower()}-{self.runtime_id}-{index}"

    def labels(self, rtype: str, index: int | None = None) -> dict[str, str]:
        labels = {self.lineage.marker: "", "job_type": rtype, "runtime_id": self.runtime_id}
        if self.lineage.name_label:
            labels[self.lineage.name_label] = self.name
        if index is not None:
            labels["task_index"] = str(index)
        return labels

    def dmlc_env(self, rtype: str) -> list[dict]:
        scheduler = self.of_type(SCHEDULER)
        values = [
            ("DMLC_PS_ROOT_PORT", str(scheduler["PsRootPort"] if scheduler else PS_ROOT_PORT)),
            ("DMLC_PS_ROOT_URI", self.child_name(SCHEDULER, 0)),
            ("DMLC_NUM_SERVER", str(self.count(SERVER))),
            ("DMLC_NUM_WORKER", str(self.count(WORKER))),
            ("DMLC_ROLE", rtype.lower()),
            ("DMLC_USE_KUBERNETES", "1"),
        ][: self.lineage.env_slots]
        return [{"name": name, "value": value} for name, value in values]

    def template(self, spec: dict, index: int, *, env: bool) -> dict:
        """The replica's pod template: the index labels (template labels kept where they differ), the DMLC
        env (on `mxnet` for the mlkube operator, on every container for v1alpha1) and the folded script."""
        rtype = spec["mxReplicaType"]
        template = copy.deepcopy(spec.get("template") or {})
        meta = template.setdefault("metadata", {})
        labels = self.labels(rtype, index)
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        if env:
            for container in template.setdefault("spec", {}).get("containers") or []:
                if self.lineage.pods_directly or container.get("name") == CONTAINER:
                    slots = self.lineage.env_slots
                    container["env"] = self.dmlc_env(rtype) + list(container.get("env") or [])[slots:]
        return with_script(template, folded_script(self.raw, [rtype, f"{rtype}-{index}"]))


def container_state(pod: dict) -> str:
    """A replica's state from its pod's `mxnet` container (the last termination while it restarts)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != CONTAINER:
            continue
        state = status.get("state") or {}
        last = (status.get("lastState") or {}).get("terminated")
        terminated = state.get("terminated") or last
        if terminated is None:
            return RUNNING if state.get("running") or state.get("waiting") else UNKNOWN
        code = int(terminated.get("exitCode") or 0)
        if code == 0:
            return RUNNING if state.get("running") or state.get("waiting") else SUCCEEDED
        retryable = code >= 128 and terminated.get("reason") != "OOMKilled"
        return RUNNING if retryable else FAILED
    return UNKNOWN


def latest_state(pods: list[dict]) -> str:
    if not pods:
        return UNKNOWN
    latest = max(pods, key=lambda p: ((p.get("status") or {}).get("startTime") or "", p["metadata"]["name"]))
    return container_state(latest)


def set_state(states: list[str]) -> str:
    if FAILED in states:
        return FAILED
    if RUNNING in states:
        return RUNNING
    if states and all(s == SUCCEEDED for s in states):
        return SUCCEEDED
    return UNKNOWN


class LegacyMxnetController(ReconcileLoop):
    """Reconciles `MxJob` (mxnet.mlkube.io/v1beta1) and `MXJob` (kubeflow.org/v1alpha1)."""

    def __init__(self) -> None:
        super().__init__()
        self.types: dict[ResourceType, Lineage] = {}
        self.cleanup_due: dict[str, float] = {}  # job uid -> when its CleanUp step runs (monotonic)

    async def run(self, cluster: Any) -> None:
        for lineage in LINEAGES:
            try:
                self.types[cluster.store.resource_type(lineage.group, lineage.version, "mxjobs")] = lineage
            except ApiError:
                continue
        await super().run(cluster)

    def _rt(self, lineage: Lineage) -> ResourceType:
        return next(rt for rt, known in self.types.items() if known == lineage)

    # -- event mapping -------------------------------------------------------------------------------------
    def initial_keys(self) -> list[Hashable]:
        return [
            (lineage.api_version, j["metadata"]["namespace"], j["metadata"]["name"])
            for rt, lineage in self.types.items()
            for j in self.store.list(rt)
        ]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if event.rt in self.types:
            return (
                [] if event.type == "DELETED" else [(event.rt.api_version, meta["namespace"], meta["name"])]
            )
        if event.rt not in (PODS, BATCH_JOBS):
            return []
        ref = controller_ref(event.object)
        if ref and event.rt == PODS and (ref.get("apiVersion"), ref.get("kind")) == ("batch/v1", "Job"):
            try:
                ref = controller_ref(self.store.get(BATCH_JOBS, meta["namespace"], ref["name"]))
            except ApiError:
                return []
        if ref and ref.get("kind") in ("MxJob", "MXJob"):
            return [(ref.get("apiVersion"), meta["namespace"], ref["name"])]
        return []

    # -- reconcile -----------------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> float | None:
        api_version, namespace, name = key
        lineage = next((known for known in self.types.values() if known.api_version == api_version), None)
        if lineage is None:
            return None
        raw = get_live(self.store, self._rt(lineage), namespace, name)
        if raw is None:
            return None
        job = MxJob(lineage, raw)
        status = copy.deepcopy(raw.get("status") or {})
        if lineage.pods_directly:
            return KubeflowPass(self, job, status).run()
        MlkubePass(self, job, status).run()
        return None

    def write(self, job: MxJob, status: dict) -> None:
        """PUT the whole object (the legacy operators' status write), with the RuntimeId it was given."""
        new = copy.deepcopy(job.raw)
        new["status"] = status
        current = self.store.get(self._rt(job.lineage), job.namespace, job.name)
        if new["spec"] != current.get("spec") or status != current.get("status"):
            self.store.replace(self._rt(job.lineage), job.namespace, job.name, new)


class _Pass:
    """One reconcile of one legacy job."""

    def __init__(self, controller: LegacyMxnetController, job: MxJob, status: dict) -> None:
        self.controller, self.job, self.status = controller, job, status
        self.store = controller.store

    def setup(self) -> str | None:
        """Validate; give the job a RuntimeId. Returns the setup error, if any."""
        problem = self.validate()
        if problem is None and not self.job.runtime_id:
            self.job.spec["RuntimeId"] = rand_string(4)
        return problem

    def validate(self) -> str | None:
        job = self.job
        for spec in job.replicas:
            containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
            if not any(c.get("name") == CONTAINER for c in containers):
                return f"Replica type {spec['mxReplicaType']} is missing a container named {CONTAINER}"
            if spec["mxReplicaType"] == SCHEDULER and spec["replicas"] != 1:
                return "The SCHEDULER must have Replicas = 1"
        return None

    def replica_statuses(self, states: dict[str, list[str]]) -> list[dict]:
        out = []
        for rtype, per_index in states.items():
            counts: dict[str, int] = {}
            for state in per_index:
                counts[state] = counts.get(state, 0) + 1
            entry = {
                self.job.lineage.status_type_key: rtype,
                "state": set_state(per_index),
                "ReplicasStates": counts,
            }
            out.append(entry)
        return out

    def write(self) -> None:
        self.controller.write(self.job, self.status)


class MlkubePass(_Pass):
    """deepinsight/mxnet-operator: batch Jobs per index, the scheduler Service, Creating → Running → Done."""

    def run(self) -> None:
        status, job = self.status, self.job
        status["controlPaused"] = bool(status.get("controlPaused", False))
        if status.get("phase") in ("Done", "Failed", "CleanUp"):
            return
        if not status.get("phase"):
            problem = self.setup()
            if problem:
                status.update(phase="Failed", reason=problem)
            else:
                status["phase"] = "Creating"
            self.write()
            return
        self.create_resources()
        states = {spec["mxReplicaType"]: self.index_states(spec) for spec in job.replicas}
        chief = SCHEDULER if self.dist else WORKER
        sets = {rtype: set_state(per_index) for rtype, per_index in states.items()}
        if FAILED in sets.values():
            status.update(phase="Done", state=FAILED)
        elif sets.get(chief) == SUCCEEDED:
            status.update(phase="Done", state=SUCCEEDED)
        else:
            status.update(phase="Running", state=RUNNING)
        status["replicaStatuses"] = self.replica_statuses(states)
        self.write()

    @property
    def dist(self) -> bool:
        return self.job.spec.get("jobMode") == "dist"

    def validate(self) -> str | None:
        mode, types = self.job.spec.get("jobMode"), [r["mxReplicaType"] for r in self.job.replicas]
        if mode == "local":
            if set(types) != {WORKER} or self.job.count(WORKER) > 1:
                return "local mode only supports one WORKER replica"
        elif mode == "dist":
            missing = [t for t in (SCHEDULER, SERVER, WORKER) if t not in types]
            if missing:
                return f"dist mode needs SCHEDULER, SERVER and WORKER replicas; missing {', '.join(missing)}"
        else:
            return f"unkonw job mode {mode}"
        return super().validate()

    def create_resources(self) -> None:
        job = self.job
        for spec in job.replicas:
            rtype = spec["mxReplicaType"]
            for index in range(spec["replicas"]):
                name = job.child_name(rtype, index)
                labels = job.labels(rtype, index)
                meta = {"name": name, "labels": labels, "ownerReferences": [owner_reference(job.raw)]}
                template = job.template(spec, index, env=self.dist)
                batch_job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": meta,
                    "spec": {"completions": 1, "parallelism": 1, "template": template},
                }
                create_quietly(self.store, BATCH_JOBS, job.namespace, batch_job)
                if self.dist and rtype == SCHEDULER:
                    service = {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": copy.deepcopy(meta),
                        "spec": {
                            "selector": labels,
                            "ports": [{"name": "ps-root-port", "port": spec["PsRootPort"]}],
                        },
                    }
                    create_quietly(self.store, SERVICES, job.namespace, service)

    def index_states(self, spec: dict) -> list[str]:
        job, states = self.job, []
        for index in range(spec["replicas"]):
            try:
                batch_job = self.store.get(
                    BATCH_JOBS, job.namespace, job.child_name(spec["mxReplicaType"], index)
                )
            except ApiError:
                states.append(UNKNOWN)
                continue
            if int((batch_job.get("status") or {}).get("succeeded") or 0) >= 1:
                states.append(SUCCEEDED)
                continue
            selector = ",".join(f"{k}={v}" for k, v in job.labels(spec["mxReplicaType"], index).items())
            states.append(latest_state(self.store.list(PODS, job.namespace, label_selector=selector)))
        return states


class KubeflowPass(_Pass):
    """kubeflow/mxnet-operator v1alpha1: pods and Services per index; the chief decides; CleanUp → Done."""

    def run(self) -> float | None:
        """One pass; the seconds until the CleanUp step is due, while it waits."""
        status, job = self.status, self.job
        phase_now = status.get("phase") or ""
        if phase_now in ("Done", "Failed"):
            self.controller.cleanup_due.pop(job.raw["metadata"]["uid"], None)
            return None
        if not phase_now:
            problem = self.setup()
            if problem:
                status.update(phase="Failed", state=FAILED, reason=problem)
            else:
                status.update(phase="Creating", state=RUNNING, reason="")
            self.write()
            return None
        if phase_now == "CleanUp":
            due = self.controller.cleanup_due.setdefault(
                job.raw["metadata"]["uid"], time.monotonic() + RESYNC
            )
            if time.monotonic() < due:
                return due - time.monotonic()
            self.clean_up()
            status["phase"] = "Done"
            self.write()
            return None
        pods = [
            p
            for p in self.store.list(PODS, job.namespace)
            if (controller_ref(p) or {}).get("uid") == job.raw["metadata"]["uid"]
        ]
        states: dict[str, list[str]] = {}
        for spec in job.replicas:
            rtype = spec["mxReplicaType"]
            per_index = []
            for index in range(spec["replicas"]):
                mine = [
                    p
                    for p in pods
                    if (p["metadata"].get("labels") or {}).get("task_index") == str(index)
                    and p["metadata"]["labels"].get("job_type") == rtype
                ]
                self.sync_index(spec, index, mine)
                per_index.append(latest_state(mine))
            states[rtype] = per_index
        chief = self.chief
        chief_states = states.get(chief["replicaName"], [])
        index = int(chief.get("replicaIndex") or 0)
        chief_state = chief_states[index] if index < len(chief_states) else UNKNOWN
        if chief_state == RUNNING:
            status.update(phase="Running", state=RUNNING)
        elif chief_state in (SUCCEEDED, FAILED):
            status.update(phase="CleanUp", state=chief_state)
        status["replicaStatuses"] = self.replica_statuses(states)
        self.write()
        return None

    @property
    def chief(self) -> dict:
        policy = self.job.spec.get("terminationPolicy") or {
            "chief": {"replicaName": WORKER, "replicaIndex": 0}
        }
        return policy.get("chief") or {}

    def validate(self) -> str | None:
        name = self.chief.get("replicaName")
        if not name:
            return "invalid termination policy: chief is required"
        if self.job.of_type(str(name)) is None:
            return f"Missing ReplicaSpec for chief: {name}"
        return super().validate()

    def sync_index(self, spec: dict, index: int, pods: list[dict]) -> None:
        """A pod when no non-Failed one exists for the index; the index's headless Service."""
        job, rtype = self.job, spec["mxReplicaType"]
        base = job.child_name(rtype, index, truncate=True)
        if not any(phase(p) != "Failed" and not p["metadata"].get("deletionTimestamp") for p in pods):
            template = job.template(spec, index, env=True)
            if job.spec.get("schedulerName"):
                template.setdefault("spec", {})["schedulerName"] = job.spec["schedulerName"]
            create_pod(
                self.store,
                job.raw,
                template,
                job.labels(rtype, index),
                component="mxnet-operator",
                name=f"{base}-{rand_string(5)}",
            )
        labels = job.labels(rtype, index)
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": base, "labels": labels, "ownerReferences": [owner_reference(job.raw)]},
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "ps-root-port", "port": spec["PsRootPort"]}],
            },
        }
        create_quietly(self.store, SERVICES, job.namespace, service)

    def clean_up(self) -> None:
        policy = self.job.spec.get("cleanupPodPolicy") or "All"
        if policy == "None":
            return
        uid = self.job.raw["metadata"]["uid"]
        for pod in self.store.list(PODS, self.job.namespace):
            if (controller_ref(pod) or {}).get("uid") == uid and (policy == "All" or is_active(pod)):
                delete_quietly(self.store, PODS, pod)

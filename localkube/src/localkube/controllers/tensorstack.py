"""TensorStack T9k `batch.tensorstack.dev/v1beta1` training jobs (tensorstack-t9k.md), from the docs.

Kinds: TensorFlowTrainingJob, PyTorchTrainingJob, XGBoostTrainingJob. Per replica (`replicaSpecs[]`,
lower-case types) a pod `<job>-<type>-<index>` labelled `tensorstack.dev/owner-name=<job>` (template labels
kept), with `restartPolicy: Never` (the controller replaces failed pods itself) and a headless Service of the
same name.
Env on every container: TF_CONFIG (`cluster` of `<pod>.<ns>.svc:<port>` per type, evaluators left out, and
`task`), or MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (PyTorch, XGBoost). PyTorch's `torchrunConfig.enabled`
runs `torchrun <options> <args>` instead of the command.

The deciding replica: TF the chief (else worker 0), PyTorch `master` (else the first replica type) index 0,
XGBoost master 0. A failed pod is replaced while its `restartPolicy` allows it (OnFailure/Always: any failure;
ExitCode: 130, 137, 143, 138) and the shared `runPolicy.backoffLimit` (default 3) is not used up, counting
`backoffCount` and `tasks[].restartCount`; otherwise the failure is final, which fails the job when it is the
deciding replica (other replicas only set `ReplicaFailure=True`). `activeDeadlineSeconds` counts from the
Initialized condition. When the job ends, `runPolicy.cleanUpPolicy` (None (default), All, Unfinished)
removes pods.

Status as the docs' real controller output shows it: `phase` (Pending, Running, Paused, Resuming, Succeeded,
Failed); conditions Initialized, Running, ReplicaFailure, Completed, Failed (+ Paused): a failure sets
`Failed=True` AND `Completed=True`, `ReplicaFailure=True` (ErrorInPod) and `Running=False`; success sets
`Completed=True`, `Failed=False` and `ReplicaFailure=False` (reason Finished). `tasks[].replicas[]` with pod
name, uid, phase (plus Creating and Deleted) and containers' state and exit code; `aggregate`;
`backoffCount`.

Run modes: `runMode.debug.enabled` creates the pods with their command replaced (per type from
`debug.replicaSpecs`, default `sleep inf`; args dropped; `skipInitContainer`), so the job never finishes;
`runMode.pause.enabled` deletes the pods (phase Paused, `Paused=True`), and turning it off resumes (phase
Resuming, then Running) with `pause.resumeSpecs` applied. Not emulated: TensorBoard, PodGroups (t9kScheduler),
elastic scaling. Guesses where the docs are silent: condition reasons and messages while running, the default
ports (TF 2222, PyTorch 23456, XGBoost 9991, or the main container's first port), the Services having no
selector (no per-replica pod label is documented).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from localkube.controllers.builtin import (
    create_pod,
    create_quietly,
    delete_quietly,
    folded_script,
    get_live,
    owned_pods,
    owner_reference,
    with_script,
)
from localkube.controllers.conditions import seconds_since
from localkube.controllers.kubeflow import controller_ref, phase
from localkube.controllers.loop import ReconcileLoop
from localkube.resources import PODS, SERVICES, ResourceType
from localkube.store import ApiError, WatchEvent, now_rfc3339

GROUP, VERSION = "batch.tensorstack.dev", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
OWNER_LABEL = "tensorstack.dev/owner-name"
CONTROLLER = "t9k-job-controller"  # events' source component (a guess: the docs show no job events)
RETRYABLE_EXIT_CODES = (130, 137, 143, 138)
DEFAULT_BACKOFF_LIMIT = 3
CONDITION_ORDER = ("Initialized", "Running", "ReplicaFailure", "Completed", "Failed", "Paused")
AGGREGATE_KEYS = ("creating", "pending", "running", "succeeded", "failed", "unknown", "deleted")
DEBUG_SCRIPT: dict[str, Any] = {"duration": None, "logs": []}  # `sleep inf`: no output, until deleted


def replica_specs(spec: dict) -> list[dict]:
    """`spec.replicaSpecs[]` as written (the kinds with an older shape normalise theirs to this)."""
    return list(spec.get("replicaSpecs") or [])


def no_env(job: Job, rtype: str, index: int) -> list[dict]:
    return []


@dataclass(frozen=True)
class T9kKind:
    kind: str
    container: str  # the main container's name (else the first)
    port: int
    restart_policy: str  # the default per replica
    master: Callable[[list[str]], str]  # replica types in spec order -> the deciding type (index 0)
    env: Callable[[Job, str, int], list[dict]] = no_env
    specs: Callable[[dict], list[dict]] = replica_specs  # the spec -> its `replicaSpecs[]` entries
    unindexed: frozenset[str] = frozenset()  # types with one pod `<job>-<type>` (launchers)
    debug_commands: Mapping[str, list[str]] = field(default_factory=dict)  # per type; else `sleep inf`

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"


class Job:
    """A T9k job object with its replica specs by type (spec order kept)."""

    def __init__(self, kind: T9kKind, raw: dict) -> None:
        self.kind, self.raw = kind, raw
        meta = raw["metadata"]
        self.name, self.namespace, self.uid = meta["name"], meta["namespace"], meta["uid"]
        self.spec: dict = raw.get("spec") or {}
        self.specs: dict[str, dict] = {}
        for spec in kind.specs(self.spec):
            self.specs[str(spec.get("type"))] = spec
        self.run_mode: dict = self.spec.get("runMode") or {}
        self.run_policy: dict = self.spec.get("runPolicy") or {}

    def replicas(self, rtype: str) -> int:
        value = self.specs[rtype].get("replicas")
        return 1 if value is None else int(value)

    @property
    def total(self) -> int:
        return sum(self.replicas(t) for t in self.specs)

    def pod_name(self, rtype: str, index: int) -> str:
        return f"{self.name}-{rtype}" if rtype in self.kind.unindexed else f"{self.name}-{rtype}-{index}"

    def replica_of(self, pod_name: str) -> tuple[str, int]:
        """Type and index of one of the job's pods, from its name."""
        rest = pod_name.removeprefix(f"{self.name}-")
        rtype, _, index = rest.rpartition("-")
        return (rtype, int(index)) if rtype and index.isdigit() else (rest, 0)

    def host(self, rtype: str, index: int) -> str:
        return f"{self.pod_name(rtype, index)}.{self.namespace}.svc"

    def port(self, rtype: str) -> int:
        ports = (main_container(self.kind, self.specs[rtype].get("template") or {}) or {}).get("ports") or []
        return int(ports[0]["containerPort"]) if ports else self.kind.port

    @property
    def master(self) -> str:
        return self.kind.master(list(self.specs))

    def rank(self, rtype: str, index: int) -> int:
        """The master type first, then the others in spec order."""
        order = [self.master, *(t for t in self.specs if t != self.master)]
        return sum(self.replicas(t) for t in order[: order.index(rtype)]) + index

    def restart_policy(self, rtype: str) -> str:
        return str(self.specs[rtype].get("restartPolicy") or self.kind.restart_policy)

    @property
    def debug(self) -> bool:
        return bool((self.run_mode.get("debug") or {}).get("enabled"))

    @property
    def paused(self) -> bool:
        return bool((self.run_mode.get("pause") or {}).get("enabled"))


def main_container(kind: T9kKind, template: dict) -> dict | None:
    containers = (template.get("spec") or {}).get("containers") or []
    return next(
        (c for c in containers if c.get("name") == kind.container), containers[0] if containers else None
    )


def tf_config(job: Job, rtype: str, index: int) -> list[dict]:
    cluster = {
        t: [f"{job.host(t, i)}:{job.port(t)}" for i in range(job.replicas(t))]
        for t in job.specs
        if t != "evaluator"
    }
    config = {"cluster": cluster, "task": {"type": rtype, "index": index}}
    return [{"name": "TF_CONFIG", "value": json.dumps(config)}]


def master_env(job: Job, rtype: str, index: int) -> list[dict]:
    values = {
        "MASTER_ADDR": job.pod_name(job.master, 0),
        "MASTER_PORT": str(job.port(job.master)),
        "RANK": str(job.rank(rtype, index)),
        "WORLD_SIZE": str(job.total),
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def _chief_or_worker(types: list[str]) -> str:
    return "chief" if "chief" in types else "worker"


def _master_or_first(types: list[str]) -> str:
    return "master" if "master" in types or not types else types[0]


KINDS = (
    T9kKind("TensorFlowTrainingJob", "tensorflow", 2222, "Never", _chief_or_worker, tf_config),
    T9kKind("PyTorchTrainingJob", "pytorch", 23456, "Never", _master_or_first, master_env),
    T9kKind("XGBoostTrainingJob", "xgboost", 9991, "OnFailure", lambda types: "master", master_env),
)


class TensorStackController(ReconcileLoop):
    """Reconciles the T9k training-job kinds."""

    def __init__(self, kinds: tuple[T9kKind, ...] = KINDS) -> None:
        super().__init__()
        self.kinds = {k.kind: k for k in kinds}
        self.types: dict[str, ResourceType] = {}
        self.restarts: dict[tuple[str, str], int] = {}  # (job uid, pod name) -> replacements, per-pod limits

    async def run(self, cluster: Any) -> None:
        for kind in self.kinds.values():
            try:
                self.types[kind.kind] = cluster.store.resource_type(GROUP, VERSION, kind.plural)
            except ApiError:
                continue
        await super().run(cluster)

    def initial_keys(self) -> list[Hashable]:
        return [
            (kind, j["metadata"]["namespace"], j["metadata"]["name"])
            for kind, rt in self.types.items()
            for j in self.store.list(rt)
        ]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if self.types.get(event.rt.kind) == event.rt:
            return [] if event.type == "DELETED" else [(event.rt.kind, meta["namespace"], meta["name"])]
        if event.rt == PODS:
            ref = controller_ref(event.object)
            if ref and ref.get("apiVersion") == API_VERSION and ref.get("kind") in self.types:
                return [(ref["kind"], meta["namespace"], ref["name"])]
        return []

    def reconcile(self, key: Any) -> float | None:
        kind, namespace, name = key
        raw = get_live(self.store, self.types[kind], namespace, name)
        if raw is None:
            return None
        return self.make_pass(self.kinds[kind], raw).run()

    def make_pass(self, kind: T9kKind, raw: dict) -> Reconciliation:
        return Reconciliation(self, Job(kind, raw))


class Reconciliation:
    """One pass over one T9k job."""

    counts_backoff = True  # the training jobs' shared restart budget, `status.backoffCount`

    def __init__(self, controller: TensorStackController, job: Job) -> None:
        self.controller, self.job = controller, job
        self.store = controller.store
        self.status: dict = copy.deepcopy(job.raw.get("status") or {})
        self.pods = {p["metadata"]["name"]: p for p in owned_pods(self.store, job.raw)}

    # -- the pass ------------------------------------------------------------------------------------------
    def run(self) -> float | None:
        status, job = self.status, self.job
        if self.counts_backoff:
            status.setdefault("backoffCount", 0)
        if status.get("phase") in ("Succeeded", "Failed"):
            self.clean_up()
        elif job.paused:
            self.pause()
        else:
            if status.get("phase") == "Paused":
                status["phase"] = "Resuming"
                self.condition("Paused", "False", "Resumed", f"{job.kind.kind} {job.name} is resumed.")
            self.create_children()
            outcome = self.decide()
            if outcome is not None:
                self.finish(*outcome)
            else:
                self.progress()
        self.write()
        return self.deadline_in()

    def create_children(self) -> None:
        job = self.job
        for rtype in job.specs:
            for index in range(job.replicas(rtype)):
                name = job.pod_name(rtype, index)
                if name not in self.pods:
                    labels = self.pod_labels(rtype, index)
                    template = self.template(rtype, index)
                    self.pods[name] = create_pod(
                        self.store, job.raw, template, labels, component=CONTROLLER, name=name
                    )
                service = {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": name,
                        "labels": {OWNER_LABEL: job.name},
                        "ownerReferences": [owner_reference(job.raw)],
                    },
                    "spec": {"clusterIP": "None", "ports": self.service_ports(rtype)},
                }
                create_quietly(self.store, SERVICES, job.namespace, service)
        if not self.has("Initialized"):
            self.condition("Initialized", "True", "-", "All sub-resources are created.")
            for type_ in ("Running", "ReplicaFailure", "Completed", "Failed"):
                self.condition(type_, "False", "Created", "")

    def pod_labels(self, rtype: str, index: int) -> dict[str, str]:
        return {OWNER_LABEL: self.job.name}

    def service_ports(self, rtype: str) -> list[dict]:
        return [{"name": "t9k-port", "port": self.job.port(rtype)}]

    def template(self, rtype: str, index: int) -> dict:
        """The replica's template: restartPolicy Never, the env, and the debug or resume overrides."""
        job = self.job
        template = copy.deepcopy(job.specs[rtype].get("template") or {})
        spec = template.setdefault("spec", {})
        spec["restartPolicy"] = "Never"
        override = None
        entry: dict[str, Any]
        if job.debug:
            debug = job.run_mode.get("debug") or {}
            entry = next((e for e in debug.get("replicaSpecs") or [] if e.get("type") == rtype), {})
            command = entry.get("command") or job.kind.debug_commands.get(rtype) or ["sleep", "inf"]
            self._override(spec, entry, command=command, args=None)
            override = DEBUG_SCRIPT
        else:
            self.launch(rtype, index, template)
            if self.has("Paused"):  # resumed once: resumeSpecs apply from now on
                pause = job.run_mode.get("pause") or {}
                entry = next((e for e in pause.get("resumeSpecs") or [] if e.get("type") == rtype), {})
                self._override(spec, entry, command=entry.get("command"), args=entry.get("args"), keep=True)
        env = job.kind.env(job, rtype, index)
        for container in spec.get("containers") or []:
            names = {e["name"] for e in env}
            container["env"] = env + [e for e in container.get("env") or [] if e.get("name") not in names]
        return with_script(template, folded_script(job.raw, [rtype, f"{rtype}-{index}"], override))

    def _override(self, spec: dict, entry: dict, *, command: Any, args: Any, keep: bool = False) -> None:
        if entry.get("skipInitContainer"):
            spec.pop("initContainers", None)
        main = main_container(self.job.kind, {"spec": spec})
        if main is None:
            return
        for key, value in (("command", command), ("args", args)):
            if value is not None:
                main[key] = list(value)
            elif not keep:
                main.pop(key, None)

    def launch(self, rtype: str, index: int, template: dict) -> None:
        """The command the kind's controller runs in immediate mode (PyTorch's torchrun mode)."""
        config = self.job.spec.get("torchrunConfig") or {}
        if self.job.kind.kind != "PyTorchTrainingJob" or not config.get("enabled"):
            return
        containers = (template.get("spec") or {}).get("containers") or []
        main = next(
            (c for c in containers if c.get("name") == "python"), containers[0] if containers else None
        )
        if main is None:
            return
        options = [
            f"--nnodes={self.job.total}",
            f"--nproc_per_node={config.get('procPerNode', '1')}",
            f"--rdzv_backend={config.get('rdzvBackend') or 'c10d'}",
            "--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
            f"--max_restarts={config.get('maxRestarts', 0)}",
            *(config.get("extraOptions") or []),
        ]
        main["command"] = ["torchrun", *options]

    # -- outcome -------------------------------------------------------------------------------------------
    def decide(self) -> tuple[str, str] | None:
        """("Succeeded" | "Failed", message) once the job is decided; replaces failed pods meanwhile."""
        job = self.job
        master = job.pod_name(job.master, 0)
        failed = self.failed_for_good()
        if master in failed:
            return (
                "Failed",
                f"{job.kind.kind} {job.name} has failed: {master} failed with exit code {failed[master]}",
            )
        if master in self.pods and phase(self.pods[master]) == "Succeeded":
            return "Succeeded", "The job has finished successfully."
        deadline, start = job.run_policy.get("activeDeadlineSeconds"), self.started()
        if deadline is not None and start and seconds_since(start) >= float(deadline):
            return "Failed", f"{job.kind.kind} {job.name} has failed: it was active longer than {deadline}s"
        return None

    def failed_for_good(self) -> dict[str, int]:
        """Replaces the failed pods that may restart (counting it); the others' names and exit codes."""
        failed = {}
        for name, pod in list(self.pods.items()):
            if phase(pod) != "Failed" or pod["metadata"].get("deletionTimestamp"):
                continue
            rtype = self.job.replica_of(name)[0]
            code = exit_code(pod)
            self.condition(
                "ReplicaFailure", "True", "ErrorInPod", f"Pod[{name}] exited with error code {code}"
            )
            if self.may_restart(rtype, name, code):
                task = self.task(rtype)
                task["restartCount"] = int(task.get("restartCount") or 0) + 1
                delete_quietly(self.store, PODS, pod)
                del self.pods[name]
            else:
                failed[name] = code
        return failed

    def may_restart(self, rtype: str, name: str, code: int) -> bool:
        """Whether the failed pod `name` is replaced; counts the restart when it is. The training jobs: per
        its `restartPolicy` string, within the job's shared `runPolicy.backoffLimit`."""
        policy, status = self.job.restart_policy(rtype), self.status
        allowed = policy in ("OnFailure", "Always") or (policy == "ExitCode" and code in RETRYABLE_EXIT_CODES)
        if not allowed or status["backoffCount"] >= int(
            self.job.run_policy.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        ):
            return False
        status["backoffCount"] += 1
        return True

    def finish(self, outcome: str, message: str) -> None:
        status = self.status
        status["phase"] = outcome
        reason = outcome
        self.condition("Running", "False", reason, message)
        self.condition("Completed", "True", reason, message)
        if outcome == "Failed":
            self.condition("Failed", "True", reason, message)
        else:
            self.condition("Failed", "False", reason, message)
            self.condition("ReplicaFailure", "False", "Finished", "")
        self.clean_up()

    def progress(self) -> None:
        running = any(phase(p) == "Running" for p in self.pods.values())
        if running:
            self.status["phase"] = "Running"
            self.condition("Running", "True", "Running", f"{self.job.kind.kind} {self.job.name} is running.")
        elif self.status.get("phase") != "Resuming":
            self.status["phase"] = "Pending"

    def pause(self) -> None:
        for pod in self.pods.values():
            delete_quietly(self.store, PODS, pod)
            delete_quietly(self.store, SERVICES, pod)
        self.pods = {}
        message = f"{self.job.kind.kind} {self.job.name} is paused."
        self.status["phase"] = "Paused"
        self.condition("Paused", "True", "Paused", message)
        if self.has("Running"):
            self.condition("Running", "False", "Paused", message)

    def clean_up(self) -> None:
        for name, pod in list(self.pods.items()):
            if self.removed_when_finished(name, pod):
                delete_quietly(self.store, PODS, pod)
                delete_quietly(self.store, SERVICES, pod)
                del self.pods[name]

    def removed_when_finished(self, name: str, pod: dict) -> bool:
        """`runPolicy.cleanUpPolicy`: None (default), All, Unfinished."""
        policy = self.job.run_policy.get("cleanUpPolicy") or "None"
        return policy == "All" or (policy == "Unfinished" and phase(pod) not in ("Succeeded", "Failed"))

    # -- status --------------------------------------------------------------------------------------------
    def has(self, type_: str) -> bool:
        return any(c.get("type") == type_ for c in self.status.get("conditions") or [])

    def started(self) -> str | None:
        found = [c for c in self.status.get("conditions") or [] if c.get("type") == "Initialized"]
        return found[0].get("lastTransitionTime") if found else None

    def condition(self, type_: str, value: str, reason: str, message: str) -> None:
        conditions = {c["type"]: c for c in self.status.get("conditions") or []}
        current = conditions.get(type_)
        if current is not None and (current["status"], current["reason"], current["message"]) == (
            value,
            reason,
            message,
        ):
            return
        transition = (
            current["lastTransitionTime"] if current and current["status"] == value else now_rfc3339()
        )
        conditions[type_] = {
            "type": type_,
            "status": value,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }
        self.status["conditions"] = [conditions[t] for t in CONDITION_ORDER if t in conditions]

    def task(self, rtype: str) -> dict:
        tasks = self.status.setdefault("tasks", [])
        found = next((t for t in tasks if t.get("type") == rtype), None)
        if found is None:
            found = {"type": rtype, "restartCount": 0, "replicas": []}
            tasks.append(found)
        return found

    def write(self) -> None:
        job = self.job
        aggregate = dict.fromkeys(AGGREGATE_KEYS, 0)
        for rtype in job.specs:
            task = self.task(rtype)
            previous = {r["name"]: r for r in task.get("replicas") or []}
            replicas = []
            for index in range(job.replicas(rtype)):
                name = job.pod_name(rtype, index)
                pod = self.pods.get(name)
                if pod is not None:
                    entry = replica_status(pod)
                elif name in previous:
                    entry = {**previous[name], "phase": "Deleted"}
                else:
                    continue
                aggregate[entry["phase"].lower()] += 1
                replicas.append(entry)
            task["replicas"] = replicas
        self.status["tasks"] = [self.task(t) for t in job.specs]
        self.status["aggregate"] = aggregate
        if self.status != (job.raw.get("status") or {}):
            self.store.update_status(
                self.controller.types[job.kind.kind], job.namespace, job.name, self.status
            )

    def deadline_in(self) -> float | None:
        deadline, start = self.job.run_policy.get("activeDeadlineSeconds"), self.started()
        if deadline is None or not start or self.status.get("phase") in ("Succeeded", "Failed", "Paused"):
            return None
        return max(float(deadline) - seconds_since(start), 0.0) + 0.01


class PerPodRestarts(Reconciliation):
    """GenericJob and the 2025 MPIJob/ColossalAIJob: `restartPolicy: {policy: Always|OnFailure|Never, limit}`
    (default OnFailure, limit 0) per replica spec: a failed pod is replaced while it has been replaced fewer
    than `limit` times (Always as OnFailure); there is no shared budget and no `backoffCount`."""

    counts_backoff = False

    def may_restart(self, rtype: str, name: str, code: int) -> bool:
        policy = self.job.specs[rtype].get("restartPolicy")
        policy = policy if isinstance(policy, dict) else {}
        key = (self.job.uid, name)
        restarts = self.controller.restarts.get(key, 0)
        if (policy.get("policy") or "OnFailure") == "Never" or restarts >= int(policy.get("limit") or 0):
            return False
        self.controller.restarts[key] = restarts + 1
        return True


def exit_code(pod: dict) -> int:
    """The first non-zero exit code of the pod's containers (0 if none)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        code = int(((status.get("state") or {}).get("terminated") or {}).get("exitCode") or 0)
        if code:
            return code
    return 0


def replica_status(pod: dict) -> dict:
    """`tasks[].replicas[]`: name, uid, phase (Creating until scheduled) and the containers' states."""
    status = pod.get("status") or {}
    pod_phase = phase(pod)
    if pod_phase == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
        pod_phase = "Creating"
    containers = []
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        name = next(iter(state), "waiting")
        entry: dict[str, Any] = {"name": cs["name"], "state": name.capitalize()}
        if "terminated" in state:
            entry["exitCode"] = int(state["terminated"].get("exitCode") or 0)
        containers.append(entry)
    return {
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "phase": pod_phase,
        "containers": containers,
    }

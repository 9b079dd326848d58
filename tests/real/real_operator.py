"""Recording what a Kubeflow controller writes (the real training operator on a RealCluster, or localkube's
emulation) while the provider's operator waits on a job: every status the job passes through and every pod
version (from two watches), and the pods and Services it made, as test data under
tests/fixtures/real-operator/.

A scenario is data: the pods' script, the restart policy, the run policy, and the steps that move the job
on (open a scripted container's gate, suspend or resume it through the provider's operators), each taken
when what was watched so far shows that the controller got there. Nothing waits on time.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from localkube.realcluster import RealCluster

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.testing import SCRIPT_ANNOTATION
from tests.operators.harness import KINDS, KindCase, make_context, manifest, run_operator

NAMESPACE = "default"
# MXJob was removed in v1.9.0: nothing serves it.
SERVED = [case for case in KINDS if case.kind != "MXJob"]
RECORDINGS = Path(__file__).parents[1] / "fixtures" / "real-operator"
TIME_FIELDS = {"lastTransitionTime", "lastUpdateTime", "startTime", "completionTime", "lastReconcileTime"}
JOB_LABEL = "training.kubeflow.org/job-name"
Statuses = list[dict[str, Any]]
DEADLINE = 4  # the deadline scenario's activeDeadlineSeconds


@dataclass(frozen=True)
class Scenario:
    """One way a job goes. ``suffix`` names its job (``to-<kind>-<suffix>``); ``compare`` is what of the
    statuses the emulation must match: ``steps``, every condition change in order, or ``final``, the last
    status's conditions, where the controller's timing decides the ones between (a deadline)."""

    name: str
    suffix: str
    restart_policy: str = "Never"
    run_policy: Mapping[str, Any] = field(default_factory=dict)
    compare: str = "steps"
    # False where TO-1.9 may leave pods it made again: past a backoff limit or deadline it deletes every pod
    # and fails the job, but a reconcile on a stale cache can recreate them (its status write then conflicts)
    # and, the job being Failed, cleanPodPolicy None keeps them (docs/testing.md).
    children_compared: bool = True


SCENARIOS = {
    s.name: s
    for s in [
        Scenario("success", "ok"),
        Scenario("failure", "fail"),
        # The restarting replica's first attempt is killed (exit code 137, retryable under ExitCode); the
        # replacement pod succeeds.
        Scenario("restart", "restart", restart_policy="ExitCode"),
        # The deciding replica fails on every attempt, restarted in place (OnFailure) until the controller
        # counts one restart: backoffLimit 1.
        Scenario(
            "backoff",
            "backoff",
            restart_policy="OnFailure",
            run_policy={"backoffLimit": 1},
            children_compared=False,
        ),
        # The deciding replica finishes once the job is past its deadline (4 s after it started), the others
        # run until deleted. TO-1.9 checks the deadline only when something makes it reconcile the job (its
        # requeue at the deadline goes to a no-op queue: kubeflow/trainer#3358), so the pod's end is that.
        Scenario(
            "deadline",
            "deadline",
            run_policy={"activeDeadlineSeconds": DEADLINE},
            compare="final",
            children_compared=False,
        ),
        # The deciding replica succeeds while the others still run.
        Scenario("clean-running", "clean-running", run_policy={"cleanPodPolicy": "Running"}),
        Scenario("clean-all", "clean-all", run_policy={"cleanPodPolicy": "All"}),
        # Suspended through TrainingJobSuspendOperator once Running, resumed through TrainingJobResumeOperator
        # once its pods are gone; the resumed pods succeed.
        Scenario("suspend", "suspend"),
    ]
}


def cases() -> list[tuple[KindCase, str]]:
    """Every (kind, scenario) recorded."""
    return [(case, name) for case in SERVED for name in SCENARIOS]


def job_name(case: KindCase, scenario: str) -> str:
    return f"to-{case.plural[:-1]}-{SCENARIOS[scenario].suffix}"


@dataclass
class Seen:
    """What the two watches delivered so far: the job's statuses (consecutive equal ones once, times
    blanked) and, per pod name, each version's ``(uid, phase)`` (phase ``Deleted`` for its DELETED event)."""

    statuses: Statuses = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=dict)  # the last version, times kept
    pods: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add_status(self, obj: dict[str, Any]) -> None:
        status = without_times(obj.get("status") or {})
        with self.changed:
            self.job = obj
            if not self.statuses or self.statuses[-1] != status:
                self.statuses.append(status)
            self.changed.notify_all()

    def add_pod(self, type_: str, obj: dict[str, Any]) -> None:
        phase = "Deleted" if type_ == "DELETED" else (obj.get("status") or {}).get("phase", "")
        with self.changed:
            self.pods.setdefault(obj["metadata"]["name"], []).append((obj["metadata"]["uid"], phase))
            self.changed.notify_all()

    def wait_until(self, check: Callable[[Seen], bool], timeout: float) -> bool:
        """Block until what was seen satisfies ``check`` (a synchronisation helper; ``check`` is looked at
        again on every change and twice a second, for the checks that read the clock)."""
        end = time.monotonic() + timeout
        with self.changed:
            while not check(self):
                if time.monotonic() > end:
                    return False
                self.changed.wait(0.5)
            return True

    def live_pods(self) -> set[str]:
        return {name for name, versions in self.pods.items() if versions[-1][1] != "Deleted"}


def has(statuses: Statuses, type_: str) -> int | None:
    """The index of the first status with condition ``type_`` True, or None."""
    return next(
        (
            i
            for i, s in enumerate(statuses)
            for c in s.get("conditions", [])
            if (c["type"], c["status"]) == (type_, "True")
        ),
        None,
    )


def ran(seen: Seen) -> bool:
    return has(seen.statuses, "Running") is not None


def restarting_written(seen: Seen) -> bool:
    return has(seen.statuses, "Restarting") is not None


def past_deadline(seen: Seen) -> bool:
    """The job started more than DEADLINE seconds ago (by its ``status.startTime``)."""
    started = (seen.job.get("status") or {}).get("startTime")
    return bool(started) and datetime.now(UTC) > datetime.fromisoformat(started) + timedelta(seconds=DEADLINE)


def suspended_without_pods(seen: Seen) -> bool:
    """The controller wrote Suspended and every pod it had made is gone."""
    return has(seen.statuses, "Suspended") is not None and bool(seen.pods) and not seen.live_pods()


def ran_after_resuming(seen: Seen) -> bool:
    suspended = has(seen.statuses, "Suspended")
    return suspended is not None and has(seen.statuses[suspended + 1 :], "Running") is not None


def replaced_and_running(pod: str) -> Callable[[Seen], bool]:
    """``pod``'s second version (a new uid: the controller deleted and recreated it) is Running. Gated on
    the pod, not on the job: TO-1.9 writes its Restarting condition only when that reconcile's status
    update does not conflict, so the job's status may never show the restart (docs/testing.md)."""

    def check(seen: Seen) -> bool:
        versions = seen.pods.get(pod, [])
        uids = [uid for uid, _ in versions]
        return len(set(uids)) > 1 and versions[-1][1] == "Running"

    return check


@dataclass(frozen=True)
class Plan:
    """A scenario for one kind: the pods' script and the steps, each ``(when, action)``; an action is
    ``("gate", name)``, ``("suspend",)`` or ``("resume",)``."""

    script: dict[str, Any]
    steps: list[tuple[Callable[[Seen], bool], tuple[str, ...]]]


def plan(case: KindCase, scenario: str, name: str) -> Plan:
    """What ``case``'s pods do in ``scenario``, and the steps that move the job on. Gates get fresh names
    (a gate stays open)."""
    gates = [f"{name}-{i}-{uuid.uuid4().hex[:8]}" for i in range(2)]
    done = {"duration": 0.2, "gate": gates[0], "after_gate": ["{type}-{index} saved model"]}
    forever = {"duration": None}
    deciding = f"{case.master}-0" if case.replicas[case.master] > 1 else case.master
    first_gate: list[tuple[Callable[[Seen], bool], tuple[str, ...]]] = [(ran, ("gate", gates[0]))]
    if scenario == "success":
        return Plan({"default": done}, first_gate)
    if scenario == "failure":
        failing = {
            "duration": 0.2,
            "gate": gates[0],
            "exit_code": 3,
            "logs": ["loading shards"],
            "after_gate": ["RuntimeError: shard 7 is corrupt"],
        }
        return Plan({"default": {"duration": 5}, deciding: failing}, first_gate)
    if scenario == "restart":
        killed = {"duration": 0.2, "gate": gates[0], "exit_code": 137, "after_gate": ["Killed"]}
        restarting = f"{case.restarting}-0"
        if case.kind == "MPIJob":
            # TO-1.9's MPIJob controller does not recreate a failed worker: it writes Restarting (ExitCode)
            # and the launcher decides; the launcher ends once Restarting is written.
            return Plan(
                {"default": {**done, "gate": gates[1]}, restarting: killed},
                [*first_gate, (restarting_written, ("gate", gates[1]))],
            )
        # The other replicas run on until the replacement runs: what the controller writes when it sees the
        # failure depends on whether they are still running (a masterless job's Restarting message).
        return Plan(
            {
                "default": {**done, "gate": gates[1]},
                restarting: {"attempts": [killed, {**done, "gate": gates[1]}]},
            },
            [
                *first_gate,
                (replaced_and_running(pod_name(case, name, case.restarting, 0)), ("gate", gates[1])),
            ],
        )
    if scenario == "backoff":
        crashing = {"duration": 0.05, "exit_code": 1, "logs": ["CUDA error: out of memory"]}
        attempts = [{**crashing, "gate": gates[0]}, crashing]
        return Plan({"default": forever, deciding: {"attempts": attempts}}, first_gate)
    if scenario == "deadline":
        return Plan({"default": forever, deciding: done}, [(past_deadline, ("gate", gates[0]))])
    if scenario in ("clean-running", "clean-all"):
        return Plan({"default": forever, case.master: done}, first_gate)
    if scenario == "suspend":
        return Plan(
            {"default": done},
            [
                (ran, ("suspend",)),
                (suspended_without_pods, ("resume",)),
                (ran_after_resuming, ("gate", gates[0])),
            ],
        )
    raise ValueError(f"unknown scenario {scenario!r}")


def settled(case: KindCase, scenario: str, name: str) -> Callable[[Seen, dict[str, Any]], bool]:
    """When the controller is done with the job's pods and Services (``children``) after the operator
    returned: the pods its policy deletes are gone (a deadline or backoff deletes every pod; cleanPodPolicy
    Running the ones still running, All every one), and so is each deleted pod's Service, which the
    controller deletes right after the pod."""
    deciding = {pod_name(case, name, case.master, i) for i in range(case.replicas[case.master])}

    def done(seen: Seen, made: dict[str, Any]) -> bool:
        pods, services = set(made["pods"]), set(made["services"])
        if scenario in ("backoff", "deadline"):
            return bool(seen.pods) and all(originals_deleted(seen))
        if scenario == "clean-all":
            return not pods and not services
        if scenario == "clean-running":
            return pods == deciding and services <= pods
        return True

    return done


def originals_deleted(seen: Seen) -> list[bool]:
    """For each pod name, whether the first pod of that name was deleted."""
    return [(versions[0][0], "Deleted") in versions for versions in seen.pods.values()]


def pod_name(case: KindCase, name: str, type_: str, index: int) -> str:
    """``<job>-<type>-<index>``; the MPIJob launcher is ``<job>-launcher``."""
    return (
        f"{name}-launcher"
        if (case.kind, type_) == ("MPIJob", "Launcher")
        else f"{name}-{type_.lower()}-{index}"
    )


def pod_names(case: KindCase, name: str) -> set[str]:
    return {pod_name(case, name, t, i) for t, n in case.replicas.items() for i in range(n)}


@dataclass
class Run:
    """One scenario's outcome: the operator's result (or its TrainingJobError), what the watches saw, the
    job's pods and Services once the controller settled, and the script."""

    outcome: Any
    seen: Seen
    children: dict[str, Any]
    script: dict[str, Any]


def run_recorded(
    api: Api,
    case: KindCase,
    scenario: str,
    open_gate: Callable[[str], None],
    *,
    mode: str = "deferrable",
    namespace: str = NAMESPACE,
) -> Run:
    """Run ``case``'s provider operator (in ``mode``) on ``scenario`` while watching the job and its pods,
    taking the scenario's steps as the controller gets there; wait until the controller settled, then
    delete the job. The provider's calls use the ``kubernetes_default`` connection; ``api`` watches."""
    name = job_name(case, scenario)
    spec = SCENARIOS[scenario]
    planned = plan(case, scenario, name)
    options: dict[str, Any] = {"run_policy": dict(spec.run_policy)} if spec.run_policy else {}
    job = scripts_on_pods(
        manifest(
            case,
            planned.script,
            name=name,
            namespace=namespace,
            restart_policy=spec.restart_policy,
            **options,
        )
    )
    op = getattr(operators, f"{case.kind}Operator")(
        task_id="train", job=job, check_interval=0.2, log_replicas="all"
    )
    actions = Actions(case.kind, name, namespace, open_gate)

    def take_steps() -> None:
        for when, action in planned.steps:
            if not seen.wait_until(when, 120):
                raise AssertionError(f"{name}: not reached before {action}: {seen.statuses[-1:]} {seen.pods}")
            actions.take(action)

    with recording(api, case.plural, namespace, name) as seen:
        stepper = Stepper(take_steps)
        try:
            outcome: Any = run_operator(op, make_context(), mode)
        except TrainingJobError as err:
            outcome = err
        stepper.join()
        made = settle(api, seen, settled(case, scenario, name), namespace, name)
        api.open(f"/apis/kubeflow.org/v1/namespaces/{namespace}/{case.plural}/{name}", "DELETE").close()
    return Run(outcome, seen, made, planned.script)


def settle(
    api: Api, seen: Seen, done: Callable[[Seen, dict[str, Any]], bool], namespace: str, name: str
) -> dict[str, Any]:
    """The job's children once ``done`` holds of them (polled: Services are not watched)."""
    end = time.monotonic() + 60
    while True:
        made = children(api, namespace, name)
        if done(seen, made):
            return made
        if time.monotonic() > end:
            raise AssertionError(
                f"{name}: the controller did not settle: {sorted(made['pods'])}, {seen.pods}"
            )
        time.sleep(0.2)


class Stepper(threading.Thread):
    """The steps, in a thread of their own while the operator waits; ``join`` re-raises what failed."""

    def __init__(self, steps: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self._steps = steps
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._steps()
        except BaseException as exc:  # join() reports it
            self.error = exc

    def join(self, timeout: float | None = 120) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error
        if self.is_alive():
            raise AssertionError("the operator returned before the scenario's steps were taken")


@dataclass(frozen=True)
class Actions:
    """The steps' actions on one job: a gate, or suspend/resume through the provider's operators."""

    kind: str
    name: str
    namespace: str
    open_gate: Callable[[str], None]

    def take(self, action: tuple[str, ...]) -> None:
        what, *args = action
        if what == "gate":
            self.open_gate(args[0])
            return
        control = (
            operators.TrainingJobSuspendOperator if what == "suspend" else operators.TrainingJobResumeOperator
        )
        control(task_id=what, job_name=self.name, kind=self.kind, namespace=self.namespace).execute(
            make_context()
        )


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


@dataclass(frozen=True)
class Api:
    """An API server as a bearer token's holder reaches it."""

    url: str
    token: str
    cafile: Path | None = None  # None: plain HTTP (localkube)

    @classmethod
    def of(cls, cluster: RealCluster) -> Api:
        return cls(cluster.url, cluster._token, cluster.certs["ca"])

    def open(self, path: str, method: str = "GET", timeout: float = 60) -> Any:
        req = urllib.request.Request(self.url + path, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        context = ssl.create_default_context(cafile=str(self.cafile)) if self.cafile else None
        return urllib.request.urlopen(req, context=context, timeout=timeout)

    def get(self, path: str) -> dict[str, Any]:
        with self.open(path) as response:
            return dict(json.loads(response.read()))


@contextmanager
def recording(api: Api, plural: str, namespace: str, name: str) -> Iterator[Seen]:
    """Watch the job ``name`` from before it exists until it is deleted (the block must delete it), and its
    pods until the block ends."""
    jobs = f"/apis/kubeflow.org/v1/namespaces/{namespace}/{plural}"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    seen = Seen()
    stopping = threading.Event()
    job_watch = _watch(api, jobs, f"fieldSelector=metadata.name%3D{name}")
    pod_watch = _watch(api, pods, f"labelSelector={urllib.parse.quote(f'{JOB_LABEL}={name}')}")

    def read(response: Any, add: Callable[[str, dict[str, Any]], None], until_deleted: bool) -> None:
        try:
            for line in response:
                event = json.loads(line)
                add(event["type"], event["object"])
                if until_deleted and event["type"] == "DELETED":
                    return
        except BaseException as exc:  # the test reports it (not the pod watch's end, its socket closed)
            if not stopping.is_set():
                seen.error = exc

    job_reader = threading.Thread(
        target=read, args=(job_watch, lambda _, obj: seen.add_status(obj), True), daemon=True
    )
    pod_reader = threading.Thread(target=read, args=(pod_watch, seen.add_pod, False), daemon=True)
    job_reader.start()
    pod_reader.start()
    try:
        yield seen
        job_reader.join(120)
    finally:
        stopping.set()
        for response in (job_watch, pod_watch):
            # The pod reader is still blocked reading: close() would wait for it, a shutdown ends its read.
            response.fp.raw._sock.shutdown(socket.SHUT_RDWR)
            response.close()
    pod_reader.join(10)
    assert not job_reader.is_alive(), f"the watch on {plural}/{name} saw no DELETED event"
    assert seen.error is None, seen.error


def _watch(api: Api, path: str, selector: str) -> Any:
    version = api.get(path)["metadata"]["resourceVersion"]
    return api.open(f"{path}?watch=true&{selector}&resourceVersion={version}&timeoutSeconds=300", timeout=300)


def children(api: Api, namespace: str, name: str) -> dict[str, Any]:
    """The job's pods and Services as the operator made them: names, labels, init containers, env, ports."""
    selector = f"labelSelector={JOB_LABEL}%3D{name}"
    pods = api.get(f"/api/v1/namespaces/{namespace}/pods?{selector}")["items"]
    services = api.get(f"/api/v1/namespaces/{namespace}/services?{selector}")["items"]
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

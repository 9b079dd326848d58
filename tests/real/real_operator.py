"""Recording what a Kubeflow controller writes (the real training operator on a RealCluster, or localkube's
emulation): every status a job passes through (from a watch), and the pods and Services it made, as test data
under tests/fixtures/real-operator/."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


# Scenario -> the suffix of its job's name. "restart": the deciding pod's first attempt is killed (exit code
# 137, retryable under restartPolicy ExitCode), its replacement succeeds.
SCENARIOS = {"success": "ok", "failure": "fail", "restart": "restart"}
RESTARTING_KINDS = ("PyTorchJob", "TFJob")  # the kinds the restart scenario runs for
Statuses = list[dict[str, Any]]


def cases() -> list[tuple[KindCase, str]]:
    """Every (kind, scenario) recorded."""
    return [
        (case, scenario)
        for case in SERVED
        for scenario in SCENARIOS
        if scenario != "restart" or case.kind in RESTARTING_KINDS
    ]


def job_name(case: KindCase, scenario: str) -> str:
    return f"to-{case.plural[:-1]}-{SCENARIOS[scenario]}"


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


def ran(statuses: Statuses) -> bool:
    return has(statuses, "Running") is not None


def ran_again(statuses: Statuses) -> bool:
    """Running again after Restarting."""
    restarting = has(statuses, "Restarting")
    return restarting is not None and ran(statuses[restarting + 1 :])


def script(case: KindCase, scenario: str, gates: list[str]) -> dict[str, Any]:
    """The pods' timeline of ``scenario``: "success"; "failure" (exit code 3) of one pod of the deciding
    replica type (JAXJob's has two: how many failed when the controller looked is then not a race);
    "restart". The deciding pods wait at ``gates[0]`` until the job is Running (the replacement in "restart"
    at ``gates[1]`` until it is Running again): the controller writes Running whatever the machine's speed."""
    done = {"duration": 0.2, "gate": gates[0], "after_gate": ["{type}-{index} saved model"]}
    if scenario == "success":
        return {"default": done}
    if scenario == "restart":
        killed = {"duration": 0.2, "gate": gates[0], "exit_code": 137, "after_gate": ["Killed"]}
        return {"default": done, case.master: {"attempts": [killed, {**done, "gate": gates[1]}]}}
    failing = f"{case.master}-0" if case.replicas[case.master] > 1 else case.master
    return {
        "default": {"duration": 5},
        failing: {
            "duration": 0.2,
            "gate": gates[0],
            "exit_code": 3,
            "logs": ["loading shards"],
            "after_gate": ["RuntimeError: shard 7 is corrupt"],
        },
    }


@dataclass
class Run:
    """One scenario's outcome: the operator's result (or its TrainingJobError), every status the job passed
    through, its pods and Services as they were when the operator returned, and the pods' script."""

    outcome: Any
    record: StatusRecording
    children: dict[str, Any]
    script: dict[str, Any]


def run_recorded(api: Api, case: KindCase, scenario: str, open_gate: Callable[[str], None]) -> Run:
    """Run ``case``'s provider operator (deferrable) on ``scenario`` while watching the job, opening the
    scenario's gates (``open_gate``) as the job reaches Running (and Running again); delete the job after."""
    name = job_name(case, scenario)
    steps = [ran, ran_again] if scenario == "restart" else [ran]
    gates = [f"{name}-{i}-{uuid.uuid4().hex[:8]}" for i in range(len(steps))]  # gates stay open: new ones
    timeline = script(case, scenario, gates)
    policy = "ExitCode" if scenario == "restart" else "Never"
    job = scripts_on_pods(manifest(case, timeline, name=name, namespace=NAMESPACE, restart_policy=policy))
    op = getattr(operators, f"{case.kind}Operator")(
        task_id="train", job=job, check_interval=0.2, log_replicas="all"
    )

    def open_gates() -> None:
        for step, gate in zip(steps, gates, strict=True):
            record.wait_until(step, 120)
            open_gate(gate)

    with recording(api, case.plural, NAMESPACE, name) as record:
        opener = threading.Thread(target=open_gates, daemon=True)
        opener.start()
        try:
            outcome: Any = run_operator(op, make_context(), "deferrable")
        except TrainingJobError as err:
            outcome = err
        opener.join(120)
        made = children(api, NAMESPACE, name)
        api.open(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{case.plural}/{name}", "DELETE").close()
    return Run(outcome, record, made, timeline)


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


@dataclass
class StatusRecording:
    """The job's statuses in the order a watch delivered them (consecutive equal ones once)."""

    statuses: list[dict[str, Any]] = field(default_factory=list)
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, obj: dict[str, Any]) -> None:
        status = without_times(obj.get("status") or {})
        with self.changed:
            if not self.statuses or self.statuses[-1] != status:
                self.statuses.append(status)
            self.changed.notify_all()

    def wait_until(self, check: Callable[[Statuses], bool], timeout: float) -> bool:
        """Block until the statuses so far satisfy ``check`` (a synchronisation helper)."""
        with self.changed:
            return self.changed.wait_for(lambda: check(self.statuses), timeout)


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
def recording(api: Api, plural: str, namespace: str, name: str) -> Iterator[StatusRecording]:
    """Watch the job ``name`` from before it exists until it is deleted (the block must delete it)."""
    base = f"/apis/kubeflow.org/v1/namespaces/{namespace}/{plural}"
    version = api.get(base)["metadata"]["resourceVersion"]
    query = f"?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={version}&timeoutSeconds=300"
    response = api.open(base + query, timeout=300)
    recorded = StatusRecording()

    def read() -> None:
        try:
            for line in response:
                event = json.loads(line)
                recorded.add(event["object"])
                if event["type"] == "DELETED":
                    return
        except BaseException as exc:  # the test reports it
            recorded.error = exc

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield recorded
        thread.join(120)
    finally:
        response.close()
    assert not thread.is_alive(), f"the watch on {plural}/{name} saw no DELETED event"
    assert recorded.error is None, recorded.error


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

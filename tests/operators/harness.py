"""Shared by the trigger, operator, sensor and DAG tests: a localkube per module, the kinds table, job
manifests with scripted timelines, and a minimal task context.

The context is the only stand-in: a task instance with the attributes the operator reads and an in-memory
``task_state_store``. Kubernetes is always the real localkube over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from localkube.store import ApiError

from airflow_provider_training.testing import scripted_job

NAMESPACE = "default"


@dataclass(frozen=True)
class KindCase:
    """One kubeflow.org/v1 kind as the tests drive it."""

    kind: str
    replicas: Mapping[str, int]
    master: str  # the replica type whose failure fails the job and whose logs are streamed
    spec: Mapping[str, Any] = field(default_factory=dict)
    restarts: str = ""  # the replica type scripted to be killed and restarted (default: master)

    @property
    def restarting(self) -> str:
        return self.restarts or self.master

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"

    def __str__(self) -> str:
        return self.kind


KINDS = [
    KindCase("TFJob", {"Chief": 1, "Worker": 1}, "Chief"),
    KindCase("PyTorchJob", {"Master": 1, "Worker": 1}, "Master"),
    KindCase("MXJob", {"Scheduler": 1, "Server": 1, "Worker": 1}, "Scheduler", {"jobMode": "MXTrain"}),
    KindCase("XGBoostJob", {"Master": 1, "Worker": 1}, "Master"),
    KindCase("PaddleJob", {"Master": 1, "Worker": 1}, "Master"),
    # localkube's MPI launcher is a bare pod that is not recreated after an ExitCode failure; workers are.
    KindCase("MPIJob", {"Launcher": 1, "Worker": 1}, "Launcher", restarts="Worker"),
    KindCase("JAXJob", {"Worker": 2}, "Worker"),
]
KIND_BY_NAME = {case.kind: case for case in KINDS}


def manifest(
    case: KindCase, script: Mapping[str, Any], *, restart_policy: str = "Never", **options: Any
) -> dict[str, Any]:
    """A job of ``case`` whose pods follow ``script`` (the scripted runtime's timeline)."""
    spec = {**case.spec, **options.pop("spec", {})}
    return scripted_job(
        case.kind,
        script,
        case.replicas,
        command=["train"],
        restart_policy=restart_policy,
        **({"spec": spec} if spec else {}),
        **options,
    )


class StateStore:
    """An in-memory ``task_state_store``: retries of one task instance share it, as in Airflow."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self.values[key] = json.loads(json.dumps(value))

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


@dataclass
class TaskInstance:
    dag_id: str = "training_dag"
    task_id: str = "train"
    run_id: str = "manual__2026-11-29T12:00:00+00:00"
    map_index: int = -1
    try_number: int = 1
    start_date: datetime = field(default_factory=lambda: datetime.now(UTC))
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def make_context(
    *, run_id: str | None = None, store: StateStore | None = None, try_number: int = 1
) -> dict[str, Any]:
    """A task context for one try; pass the same ``store`` and ``run_id`` for a retry."""
    ti = TaskInstance(run_id=run_id or f"manual__{uuid.uuid4().hex[:12]}", try_number=try_number)
    store = store if store is not None else StateStore()
    return {"ti": ti, "run_id": ti.run_id, "task_state_store": store}


@contextmanager
def serve(tmp_path_factory: pytest.TempPathFactory, **options: Any) -> Iterator[LocalKube]:
    """A localkube with the scripted runtime (``options`` go to LocalKube, e.g. ``controllers=[]``) that the
    default connection points at, until the block ends."""
    kube = LocalKube(runtime="scripted", **options)
    with kube, pytest.MonkeyPatch.context() as mp:
        path: Path = kube.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        mp.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(path))
        yield kube


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """One localkube (default controllers, scripted runtime) per test module."""
    with serve(tmp_path_factory) as kube:
        yield kube


def resource(kube: LocalKube, case: KindCase) -> Any:
    return kube.store.resource_type("kubeflow.org", "v1", case.plural)


def jobs(kube: LocalKube, case: KindCase) -> list[dict[str, Any]]:
    return kube.store.list(resource(kube, case), NAMESPACE)


def job_or_none(kube: LocalKube, case: KindCase, name: str) -> dict[str, Any] | None:
    try:
        return kube.store.get(resource(kube, case), NAMESPACE, name)
    except ApiError as err:
        if err.code == 404:
            return None
        raise


def wait_for(check: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy (a synchronisation helper, not an assertion)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s: {check}")


def pods_running(kube: LocalKube, name: str) -> bool:
    from localkube.resources import PODS

    pods = kube.store.list(PODS, NAMESPACE, label_selector=f"training.kubeflow.org/job-name={name}")
    return bool(pods) and any((p.get("status") or {}).get("phase") == "Running" for p in pods)


def watching(kube: LocalKube, case: KindCase, since: int) -> bool:
    """Whether a watch on the kind's jobs was opened after request number ``since`` (the wait is live)."""
    return any(
        r.path.endswith(f"/{case.plural}") and r.query.get("watch") in ("true", "1", "True")
        for r in kube.requests[since:]
    )


def sent_since(kube: LocalKube, since: int) -> list[str]:
    """The requests localkube answered after request number ``since``, as ``"GET /path?query"`` lines."""
    return [
        f"{r.method} {r.path}"
        + ("?" + "&".join(f"{k}={v}" for k, v in sorted(r.query.items())) if r.query else "")
        for r in kube.requests[since:]
    ]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in a thread; the dict gets ``result`` or ``error``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def run_until_logged(
    capsys: pytest.CaptureFixture[str], fn: Callable[[], Any], *gates: tuple[str, str]
) -> tuple[Any, str]:
    """Run ``fn`` in a thread; each time its output shows the next ``(text, gate)``'s text, open that
    localkube gate (one the job's containers wait at). Returns ``fn``'s result and all it printed: a test
    sees the intermediate states (``is Running``, ``is Restarting``) before the job moves on, however slow
    the machine is."""
    from localkube.runtime import close_gate, open_gate

    for _, gate in gates:
        close_gate(gate)
    thread, outcome = in_thread(fn)
    printed: list[str] = []

    def shown(text: str) -> bool:
        printed.append(capsys.readouterr().out)
        return text in "".join(printed) or not thread.is_alive()

    try:
        for text, gate in gates:
            wait_for(lambda text=text: shown(text), timeout=120)
            open_gate(gate)
    finally:
        for _, gate in gates:
            open_gate(gate)
        thread.join()
    printed.append(capsys.readouterr().out)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], "".join(printed)


def first_event(trigger: Any) -> dict[str, Any]:
    """What the triggerer does for a task: run the (deserialized) trigger to its first event."""
    cls_path, kwargs = trigger.serialize()
    module, _, name = cls_path.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)

    async def run() -> dict[str, Any]:
        agen = cls(**kwargs).run()
        try:
            return dict((await anext(agen)).payload)
        finally:
            await agen.aclose()

    return asyncio.run(run())


def run_operator(op: Any, context: dict[str, Any], mode: str, *, gate: str | None = None) -> Any:
    """Run ``op`` (operator or sensor) as Airflow would in ``mode`` ("sync" or "deferrable"): in deferrable
    mode, execute -> TaskDeferred -> the (serialized) trigger's first event -> ``resume_execution``.

    ``gate``: the localkube gate the job's deciding container waits at. It opens once the task deferred (at
    once in sync mode), so a deferrable task on a short job defers however slow the machine is."""
    from airflow.sdk.exceptions import TaskDeferred
    from localkube.runtime import open_gate

    op.deferrable = mode == "deferrable"
    if mode == "sync":
        if gate is not None:
            open_gate(gate)
        return op.execute(context)
    try:
        op.execute(context)
    except TaskDeferred as deferred:
        assert deferred.method_name == "execute_complete"
        if gate is not None:
            open_gate(gate)
        event = first_event(deferred.trigger)
        return op.resume_execution(deferred.method_name, {**(deferred.kwargs or {}), "event": event}, context)
    raise AssertionError("a deferrable operator waiting on a live job must defer")


MODES = ["sync", "deferrable"]


def run_driven(op: Any, mode: str, drive: Callable[[str], None]) -> Any:
    """Run ``op`` in ``mode``; ``drive(job_name)`` plays the controllers (of kinds localkube does not run)
    once the job exists (sync) or the task deferred (deferrable), then the wait goes on as Airflow would run
    it."""
    from airflow.sdk.exceptions import TaskDeferred

    context = make_context()
    if mode == "sync":
        op.deferrable = False
        thread, outcome = in_thread(lambda: op.execute(context))
        drive(wait_for(lambda: op._job_ref).name)
        thread.join(60)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]
    op.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert op._job_ref is not None
    drive(op._job_ref.name)
    event = first_event(deferred.value.trigger)
    kwargs = {**(deferred.value.kwargs or {}), "event": event}
    return op.resume_execution(deferred.value.method_name, kwargs, context)

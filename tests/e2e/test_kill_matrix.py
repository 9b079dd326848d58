"""Killing a task never orphans its job, with real Airflow components (tests/e2e/conftest.py) on localkube.

Every cell of action {mark failed, mark success, clear} x task {running sync, deferred} x triggerer {up,
down (stopped before the action, started after), restarting (SIGTERM right after the action, then started)}
has its own DAG run (``kill-<run id>`` is its job). One test per triggerer state runs its cells side by side:
each waits for its task to be running or deferred with the job Running (and, deferred, for its trigger to
see it Running) before the actions. "Deleted" means the job and its pods are gone within 30 s of a
triggerer being available; ``on_kill_action="keep"`` keeps the job; a cleared task's next try ends with
exactly one live job, its own, and a triggerer restart without any action keeps a deferred task's job.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, config
from localkube.cluster import LocalKube

from tests.e2e.conftest import START_TIMEOUT, Airflow
from tests.e2e.test_airflow_components import pytorch_job as job_of

pytestmark = pytest.mark.timeout(600)

SETTLE_WITHIN = 240.0  # a task to start and its job to run, on a loaded 2-core machine
DELETED_WITHIN = 30.0  # seconds after a triggerer is available (or after the action, in sync mode)
ACTIONS = ("failed", "success", "clear")
MODES = ("deferred", "sync")


@dataclass(frozen=True)
class Cell:
    batch: str  # the triggerer state: up, down, restart
    mode: str  # deferred or sync
    action: str | None  # failed, success, clear; None: no action (a triggerer restart only)
    keep: bool = False

    @property
    def dag_id(self) -> str:
        return f"e2e_kill_{self.mode}_{'keep' if self.keep else 'delete'}"

    @property
    def run_id(self) -> str:
        return f"{self.batch}-{self.mode[:3]}-{self.action or 'none'}{'-keep' if self.keep else ''}"

    @property
    def job(self) -> str:
        return f"kill-{self.run_id}"


def cells(batch: str, *extra: Cell) -> list[Cell]:
    return [Cell(batch, mode, action) for mode in MODES for action in ACTIONS] + list(extra)


def pods_of(kube: LocalKube, name: str) -> dict[str, str]:
    """The job's pods (``<job>-<replica>-<index>``): name -> the uid of the job that owns it."""
    api = client.CoreV1Api(config.new_client_from_config(str(kube.kubeconfig)))
    try:
        pods = api.list_namespaced_pod("default").items
    finally:
        api.api_client.close()
    return {
        p.metadata.name: next((r.uid for r in p.metadata.owner_references or []), "")
        for p in pods
        if re.fullmatch(rf"{re.escape(name)}-[a-z]+-[0-9]+", p.metadata.name)  # not kill-x-keep-master-0
    }


def running(job: dict[str, Any] | None) -> bool:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Running" and c["status"] == "True" for c in conditions)


def gone(kube: LocalKube, cell: Cell) -> bool:
    return job_of(kube, cell.job) is None and not pods_of(kube, cell.job)


def waiter_log(airflow: Airflow, cell: Cell, try_number: int = 1) -> str:
    """Where the try's wait logs: its trigger's log (deferred) or its task log (sync)."""
    pattern = f"attempt={try_number}.log" + (".trigger.*.log" if cell.mode == "deferred" else "")
    files = sorted(airflow.task_dir(cell.dag_id, cell.run_id, "train").glob(pattern))
    return "".join(f.read_text(errors="replace") for f in files)


def ti(airflow: Airflow, cell: Cell) -> dict[str, Any]:
    """The task instance; an API server too busy to answer in time (a loaded machine) is asked again."""
    for attempt in range(3):
        try:
            return airflow.task_instance(cell.dag_id, cell.run_id, "train")
        except TimeoutError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def settled(airflow: Airflow, kube: LocalKube, cell: Cell, try_number: int = 1) -> bool:
    """The try is deferred or running (as its mode says), its job Running and seen Running by its waiter."""
    if f"{cell.job} is Running" not in waiter_log(airflow, cell, try_number) or not running(
        job_of(kube, cell.job)
    ):
        return False
    state = ti(airflow, cell)
    assert state["state"] not in ("failed", "success", "upstream_failed"), (cell, state)
    return state["state"] == ("deferred" if cell.mode == "deferred" else "running")


def start(airflow: Airflow, kube: LocalKube, batch: list[Cell]) -> dict[Cell, str]:
    """Run every cell's DAG until its task is settled (deferred ones first: sync tasks hold executor slots);
    returns each job's uid."""
    for group in ([c for c in batch if c.mode == "deferred"], [c for c in batch if c.mode == "sync"]):
        for cell in group:
            airflow.trigger(cell.dag_id, cell.run_id)
        for cell in group:
            airflow.wait(f"{cell} to settle", lambda cell=cell: settled(airflow, kube, cell), SETTLE_WITHIN)
    return {cell: job_of(kube, cell.job)["metadata"]["uid"] for cell in batch}  # type: ignore[index]


def act(airflow: Airflow, cell: Cell) -> None:
    if cell.action == "clear":
        airflow.clear(cell.dag_id, cell.run_id, "train")
    elif cell.action is not None:
        airflow.set_state(cell.dag_id, cell.run_id, "train", cell.action)


def start_triggerer(airflow: Airflow) -> float:
    """Start the triggerer; returns the time from which it is available: its first heartbeat, which it
    sends once its runner has started and it has loaded its triggers."""
    started = datetime.now(UTC)
    airflow.start("triggerer")

    def heartbeat() -> bool:
        beat = airflow.request("GET", "/monitor/health")["triggerer"].get("latest_triggerer_heartbeat")
        return beat is not None and datetime.fromisoformat(beat) > started

    airflow.wait("the triggerer's first heartbeat", heartbeat, START_TIMEOUT)
    return time.monotonic()


@pytest.fixture(autouse=True)
def triggerer_up(airflow: Airflow) -> None:
    """Every test starts with a triggerer running, also after an earlier test failed while it was down."""
    if "triggerer" not in airflow.processes:
        start_triggerer(airflow)


def wait_within(airflow: Airflow, what: str, check: Callable[[], Any], since: float) -> None:
    """``check`` holds within DELETED_WITHIN seconds of ``since`` (fails with the components' output)."""
    airflow.wait(what, check, max(0.5, since + DELETED_WITHIN - time.monotonic()))


def verify(airflow: Airflow, kube: LocalKube, batch: list[Cell], uids: dict[Cell, str], since: float) -> None:
    """Every cell's outcome; ``since``: when a triggerer was available again (sync cells: the actions)."""
    for cell in batch:
        if cell.action is None:
            continue
        if cell.keep:
            continue
        if cell.action == "clear":
            verify_next_try(airflow, kube, cell, uids[cell], since)
        else:
            wait_within(
                airflow, f"{cell.job} and its pods to be deleted", lambda cell=cell: gone(kube, cell), since
            )
            assert ti(airflow, cell)["state"] == cell.action
    for cell in batch:
        if cell.keep:
            verify_kept(airflow, kube, cell, uids[cell], since)
        if cell.action is None:  # a restart or redistribution of a still-deferred task keeps its job
            airflow.wait(
                f"{cell} to settle again", lambda cell=cell: ti(airflow, cell)["state"] == "deferred", 30
            )
            job = job_of(kube, cell.job)
            assert job is not None and job["metadata"]["uid"] == uids[cell] and running(job), job
            assert "deletionTimestamp" not in job["metadata"]


def verify_next_try(airflow: Airflow, kube: LocalKube, cell: Cell, old_uid: str, since: float) -> None:
    """The killed try's job and pods are gone; the next try runs with exactly one live job, its own."""

    def old_gone() -> bool:
        job = job_of(kube, cell.job)
        return (job is None or job["metadata"]["uid"] != old_uid) and old_uid not in pods_of(
            kube, cell.job
        ).values()

    wait_within(airflow, f"{cell}: the killed try's job and pods to be gone", old_gone, since)
    next_try = lambda: settled(airflow, kube, cell, try_number=2)  # noqa: E731
    airflow.wait(f"{cell}: the next try to settle", next_try, SETTLE_WITHIN)
    job = job_of(kube, cell.job)
    assert job is not None and job["metadata"]["uid"] != old_uid
    assert job["metadata"]["annotations"]["training.airflow.apache.org/try-number"] == "2"
    assert set(pods_of(kube, cell.job).values()) == {job["metadata"]["uid"]}
    assert "deletionTimestamp" not in job["metadata"]
    airflow.mark_failed(cell.dag_id, cell.run_id, "train")  # frees its executor slot for the next test
    airflow.wait(f"{cell}: the next try's job to go", lambda: gone(kube, cell), DELETED_WITHIN)


def verify_kept(airflow: Airflow, kube: LocalKube, cell: Cell, uid: str, since: float) -> None:
    """on_kill ran (deferred: the trigger says it keeps the job; sync: the task process was killed) and the
    job is still there, not being deleted."""
    if cell.mode == "deferred":
        said = f"Keeping PyTorchJob default/{cell.job} (on_kill_action='keep')"
    else:
        said = "Task killed!"
    wait_within(airflow, f"{cell}: on_kill to run", lambda: said in waiter_log(airflow, cell), since)
    job = job_of(kube, cell.job)
    assert job is not None and job["metadata"]["uid"] == uid and running(job), job
    assert "deletionTimestamp" not in job["metadata"]
    assert set(pods_of(kube, cell.job).values()) == {uid}


def test_kills_with_the_triggerer_up(airflow: Airflow, kube: LocalKube) -> None:
    batch = cells("up", Cell("up", "deferred", "failed", keep=True), Cell("up", "sync", "failed", keep=True))
    uids = start(airflow, kube, batch)

    for cell in batch:
        act(airflow, cell)
    verify(airflow, kube, batch, uids, time.monotonic())


def test_kills_with_the_triggerer_down(airflow: Airflow, kube: LocalKube) -> None:
    batch = cells("down", Cell("down", "deferred", "failed", keep=True))
    uids = start(airflow, kube, batch)

    airflow.stop("triggerer")
    for cell in batch:
        act(airflow, cell)
    verify(airflow, kube, batch, uids, start_triggerer(airflow))


def restart_around(airflow: Airflow, kube: LocalKube, batch: list[Cell]) -> None:
    uids = start(airflow, kube, batch)

    for cell in batch:
        act(airflow, cell)
    airflow.send("triggerer", signal.SIGTERM)  # right after the actions: it may have seen some of them
    airflow.reap("triggerer")
    verify(airflow, kube, batch, uids, start_triggerer(airflow))


def test_kills_while_the_triggerer_restarts(airflow: Airflow, kube: LocalKube) -> None:
    deferred_marks = {("deferred", "failed"), ("deferred", "success")}
    batch = [c for c in cells("restart") if (c.mode, c.action) not in deferred_marks]
    restart_around(airflow, kube, [*batch, Cell("restart", "deferred", None)])


def test_marking_deferred_tasks_while_the_triggerer_restarts(airflow: Airflow, kube: LocalKube) -> None:
    """The case no triggerer can cover (one stopped in the loop that drops the marked task's trigger never
    cancels it): the API server's kill listener deletes the job as the user marks the task."""
    marks = [Cell("restart2", "deferred", "failed"), Cell("restart2", "deferred", "success")]
    restart_around(airflow, kube, marks)
    said = airflow.output("api-server")
    for cell in marks:
        assert f"marked {cell.action} while deferred: deleting PyTorchJob default/{cell.job}" in said


def test_a_deferral_airflow_times_out_with_no_triggerer_deletes_the_job(
    airflow: Airflow, kube: LocalKube
) -> None:
    """No triggerer runs the trigger, so its own deadline never fires: the scheduler fails the deferral past
    its padded timeout, and the worker that resumes the task deletes the job before failing it."""
    cell = Cell("timeout", "deferred", None)
    dag_id, run_id = "e2e_kill_deferral_timeout", cell.run_id
    airflow.stop("triggerer")  # before the run: no trigger of this task ever starts
    airflow.trigger(dag_id, run_id)
    airflow.wait(
        "the task to defer with its job running",
        lambda: (
            airflow.task_instance(dag_id, run_id, "train")["state"] == "deferred"
            and running(job_of(kube, cell.job))
        ),
        SETTLE_WITHIN,
    )
    # The deferral's timeout: the 45 s deadline's rest plus at least 60 s; the scheduler checks every 15 s.
    airflow.wait("the job to be deleted", lambda: gone(kube, cell), 300)
    airflow.wait(
        "the task to fail", lambda: airflow.task_instance(dag_id, run_id, "train")["state"] == "failed", 60
    )
    log = "".join(
        f.read_text(errors="replace") for f in sorted(airflow.task_dir(dag_id, run_id, "train").glob("*.log"))
    )
    assert f"Deleting PyTorchJob default/{cell.job} (the deferral timed out)" in log

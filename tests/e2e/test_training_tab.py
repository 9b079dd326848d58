"""The Training tab in a real browser: Debian's chromium (playwright-core) against the real api-server,
scheduler, dag-processor and triggerer, and localkube running a deferred PyTorchJob (scripted runtime).

The job's replicas hold at a localkube gate after their first log line, so the tab is seen following a
running job (both replicas listed, the line shown, the log stream live) however slow the machine is; the
test then opens the gate, and the lines written after it must reach the open tab through the stream, and
the tab must show the job Succeeded and stop refreshing. A user whom Airflow's auth manager refuses the DAG
is refused by the tab too, and users refused the DAG's task logs or XComs are refused the lines as
Airflow's own log and XCom routes refuse them. An api-server stopped while a log stream is open exits
without waiting for the browser, and the stream resumes on the api-server started after it. Screenshots
(training-tab-*.png) go to a temporary directory, or to ``$TRAINING_TAB_SCREENSHOTS``:
``TRAINING_TAB_SCREENSHOTS=docs/images`` refreshes those of docs/ui-tab.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from localkube.cluster import LocalKube
from localkube.gates import close_gate, gate, open_gate

from tests.e2e.browser.chromium import Chromium, missing
from tests.e2e.conftest import START_TIMEOUT, Airflow, deploy
from tests.e2e.dag_scoped_auth import NO_LOGS, NO_XCOM, OUTSIDER, PRIVATE_DAG
from tests.e2e.test_airflow_components import wait_deferred
from tests.e2e.ui_dag_files.e2e_ui import GATE, RESTART_GATE, restart_dag
from tests.plugins.sse import sse_events

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {
    "admin": "admin-e2e-password",
    OUTSIDER: "outsider-e2e-password",
    NO_LOGS: "nologs-e2e-password",
    NO_XCOM: "noxcom-e2e-password",
}
RUN_ID = "ui1"
TAB = f"/dags/{PRIVATE_DAG}/runs/{RUN_ID}/tasks/train/plugin/training"
QUERY = f"dag_id={PRIVATE_DAG}&run_id={RUN_ID}&task_id=train&map_index=-1"
# An upper bound of the api-server's exit once SIGTERM'd, far below its graceful-shutdown timeout
# ([api] worker_timeout, 120 s), for which uvicorn waits on an open response.
SHUTDOWN_BOUND = 20.0

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(missing() is not None, reason=f"no browser: {missing()}"),
]


@pytest.fixture(scope="module")
def ui_airflow(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """The four components with real logins: ``admin`` (admin), ``outsider`` (viewer, refused the DAG), and
    ``nologs`` and ``noxcom`` (viewers, refused task logs or XComs)."""
    secrets = tmp_path_factory.mktemp("e2e-ui-auth") / "passwords.json"
    secrets.write_text(json.dumps(PASSWORDS))
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.e2e.dag_scoped_auth.DagScopedSimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": (
            f"admin:admin,{OUTSIDER}:viewer,{NO_LOGS}:viewer,{NO_XCOM}:viewer"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(secrets),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    folder = Path(__file__).parent / "ui_dag_files"
    with deploy(kube, tmp_path_factory, folder, env=env, login=("admin", PASSWORDS["admin"])) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: ``$TRAINING_TAB_SCREENSHOTS`` (repository-relative), else a temp dir."""
    chosen = os.environ.get("TRAINING_TAB_SCREENSHOTS")
    return ROOT / chosen if chosen else tmp_path_factory.mktemp("training-tab-screenshots")


@pytest.fixture
def browser(ui_airflow: Airflow) -> Iterator[Chromium]:
    chromium = Chromium(ui_airflow.home / "chromium.log")
    try:
        yield chromium
    finally:
        chromium.close()


def token_of(airflow: Airflow, user: str) -> str:
    """``user``'s JWT, from the api-server's login route."""
    saved = airflow.login, airflow.token
    airflow.login, airflow.token = (user, PASSWORDS[user]), None
    try:
        return airflow.bearer_token()
    finally:
        airflow.login, airflow.token = saved


def job_status_as(airflow: Airflow, user: str) -> int:
    """The HTTP status of ``GET /training/api/job`` for the tab's task instance, as ``user``."""
    return status_as(airflow, user, f"/training/api/job?{QUERY}")


def status_as(airflow: Airflow, user: str, path: str) -> int:
    """The HTTP status of ``GET path`` as ``user`` (the body of a stream is not read)."""
    headers = {"Authorization": f"Bearer {token_of(airflow, user)}"}
    req = urllib.request.Request(f"{airflow.base_url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_the_training_tab_follows_a_deferred_pytorchjob(
    ui_airflow: Airflow, browser: Chromium, images: Path
) -> None:
    airflow = ui_airflow
    close_gate(GATE)
    airflow.trigger(PRIVATE_DAG, RUN_ID)
    wait_deferred(airflow, PRIVATE_DAG, RUN_ID)
    # Both replicas wrote their first line and hold at the gate: the job is Running until the test opens it.
    airflow.wait("both replicas at the gate", lambda: len(gate(GATE).arrived) >= 2, timeout=60)

    browser.open()
    browser.login(airflow.base_url, "admin", PASSWORDS["admin"], TAB)
    browser.goto(airflow.base_url + TAB)
    assert browser.wait(testid="job-state", text="Running") == "Running"
    assert "e2e-ui-master-0" in browser.wait(testid="pod-master-0")
    assert "e2e-ui-worker-0" in browser.wait(testid="pod-worker-0")
    assert browser.texts(css="[aria-label=Replicas] tbody tr") == [
        "Master\t1\t1\t0\t0",
        "Worker\t1\t1\t0\t0",
    ]
    browser.wait(testid="log-line", text="e2e-ui-master-0: epoch 1 loss 0.41")
    browser.wait(css="[data-testid=log-state][data-state=live]")
    browser.screenshot(images / "training-tab-running.png")

    open_gate(GATE)
    # Written after the gate opened, so only the open log stream can have brought them to the page.
    browser.wait(testid="log-line", text="e2e-ui-master-0: model saved")
    assert browser.texts(testid="log-line") == [
        "e2e-ui-master-0: epoch 1 loss 0.41",
        "e2e-ui-master-0: epoch 2 loss 0.30",
        "e2e-ui-master-0: model saved",
    ]
    browser.wait(testid="job-state", text="Succeeded")
    browser.wait(css="[data-testid=training-tab][data-refreshing=false]")
    browser.wait(css="[data-testid=log-state][data-state=ended]")
    airflow.wait(
        "the task to succeed",
        lambda: airflow.task_instance(PRIVATE_DAG, RUN_ID, "train")["state"] == "success",
        timeout=60,
    )
    browser.screenshot(images / "training-tab-succeeded.png")

    browser.open(color_scheme="dark")
    browser.login(airflow.base_url, "admin", PASSWORDS["admin"], TAB)
    browser.goto(airflow.base_url + TAB)
    browser.wait(testid="job-state", text="Succeeded")
    browser.wait(testid="log-line", text="e2e-ui-master-0: model saved")
    browser.screenshot(images / "training-tab-succeeded-dark.png")


def test_a_user_refused_the_dag_is_refused_by_the_tab(
    ui_airflow: Airflow, browser: Chromium, images: Path
) -> None:
    assert job_status_as(ui_airflow, OUTSIDER) == 403
    assert job_status_as(ui_airflow, "admin") not in (401, 403)

    browser.open()
    browser.login(ui_airflow.base_url, OUTSIDER, PASSWORDS[OUTSIDER], TAB)
    browser.goto(ui_airflow.base_url + TAB)
    message = browser.wait(testid="request-error")
    assert "not allowed to read this DAG's task instances (403 Forbidden)" in message
    browser.screenshot(images / "training-tab-forbidden.png")


def test_the_log_routes_demand_what_airflows_own_routes_demand(ui_airflow: Airflow, kube: LocalKube) -> None:
    """Against the api-server of the first test's finished run: its pods are kept, their last lines saved."""
    airflow = ui_airflow
    task = f"/api/v2/dags/{PRIVATE_DAG}/dagRuns/{RUN_ID}/taskInstances/train"
    logs = f"/training/api/logs?{QUERY}&replica=master-0"
    stream = f"/training/api/logs/stream?{QUERY}&replica=master-0"
    # The auth manager's decisions, as Airflow's own log and XCom routes apply them:
    assert status_as(airflow, NO_LOGS, f"{task}/logs/1") == 403
    assert status_as(airflow, NO_LOGS, f"{task}/xcomEntries") == 200
    assert status_as(airflow, NO_XCOM, f"{task}/xcomEntries") == 403
    assert status_as(airflow, NO_XCOM, f"{task}/logs/1") == 200

    assert status_as(airflow, NO_LOGS, f"/training/api/job?{QUERY}") == 200
    assert status_as(airflow, NO_LOGS, logs) == 403
    assert status_as(airflow, NO_LOGS, stream) == 403
    assert status_as(airflow, NO_XCOM, logs) == 200  # the pod's own log, read from the cluster
    assert status_as(airflow, NO_XCOM, stream) == 200

    # The pods gone, the tab shows the lines the trigger saved (an XCom): not to a user refused XComs.
    kube.call(_delete_pods, kube, "e2e-ui-")
    admin = {"Authorization": f"Bearer {token_of(airflow, 'admin')}"}
    saved = httpx.get(f"{airflow.base_url}{logs}", headers=admin, timeout=30)
    assert saved.status_code == 200 and saved.json()["source"] == "saved", saved.text
    assert "e2e-ui-master-0: model saved" in [line["text"] for line in saved.json()["lines"]]
    assert status_as(airflow, NO_XCOM, logs) == 403
    assert status_as(airflow, NO_LOGS, logs) == 403


def _delete_pods(cluster: LocalKube, prefix: str) -> None:
    from localkube.resources import PODS

    for pod in cluster.store.list(PODS, "default"):
        if pod["metadata"]["name"].startswith(prefix):
            cluster.store.delete(PODS, "default", pod["metadata"]["name"])


def test_an_open_log_stream_does_not_hold_the_api_server_at_shutdown(ui_airflow: Airflow) -> None:
    """A rolling restart: SIGTERM ends the open stream (no ``end`` event), the api-server exits well within
    its graceful-shutdown timeout, and the stream resumes from its last id on the next api-server."""
    airflow = ui_airflow
    dag_id, run_id, gate_name = restart_dag.dag_id, "restart1", RESTART_GATE
    close_gate(gate_name)
    airflow.trigger(dag_id, run_id)
    wait_deferred(airflow, dag_id, run_id)
    airflow.wait("both replicas at the gate", lambda: len(gate(gate_name).arrived) >= 2, timeout=60)
    url = f"{airflow.base_url}/training/api/logs/stream"
    params = {"dag_id": dag_id, "run_id": run_id, "task_id": "train", "map_index": -1, "replica": "master-0"}
    admin = {"Authorization": f"Bearer {token_of(airflow, 'admin')}"}

    before: list[tuple[str, str | None, dict[str, Any]]] = []
    first_line = threading.Event()
    closed: list[str] = []

    def follow() -> None:
        try:
            with httpx.stream(
                "GET", url, params=params, headers=admin, timeout=httpx.Timeout(30, read=None)
            ) as r:
                assert r.status_code == 200, r.read()
                for event in sse_events(r.iter_lines()):
                    before.append(event)
                    first_line.set()
            closed.append("by the server, cleanly")
        except Exception as err:
            closed.append(repr(err))

    reader = threading.Thread(target=follow, name="log stream", daemon=True)
    reader.start()
    assert first_line.wait(60), closed
    api_server = airflow.processes["api-server"]
    airflow.send("api-server", signal.SIGTERM)
    try:
        api_server.wait(timeout=SHUTDOWN_BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"the api-server did not exit within {SHUTDOWN_BOUND:.0f} s of SIGTERM with a log stream open"
        )
    airflow.reap("api-server")
    reader.join(10)
    assert closed == ["by the server, cleanly"]
    assert [(e, d["text"]) for e, _, d in before] == [("line", "e2e-ui-restart-master-0: before the restart")]

    airflow.start("api-server")
    airflow.wait("the api-server to answer again", lambda: _answers(airflow), START_TIMEOUT)
    open_gate(gate_name)
    resume = {**admin, "Last-Event-ID": str(before[-1][1])}
    with httpx.stream("GET", url, params=params, headers=resume, timeout=60) as again:
        after = list(sse_events(again.iter_lines()))
    assert [(e, d.get("text")) for e, _, d in after] == [
        ("line", "e2e-ui-restart-master-0: after the restart"),
        ("end", None),
    ]


def _answers(airflow: Airflow) -> bool:
    try:
        airflow.request("GET", "/version")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    return True

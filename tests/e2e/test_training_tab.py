"""The Training tab in a real browser: Debian's chromium (playwright-core) against the real api-server,
scheduler, dag-processor and triggerer, and localkube running a deferred PyTorchJob (scripted runtime).

The job's replicas hold at a localkube gate after their first log line, so the tab is seen following a
running job (both replicas listed, the line shown, the log stream live) however slow the machine is; the
test then opens the gate, and the lines written after it must reach the open tab through the stream, and
the tab must show the job Succeeded and stop refreshing. A user whom Airflow's auth manager refuses the DAG
is refused by the tab too. Screenshots (training-tab-*.png) go to a temporary directory, or to
``$TRAINING_TAB_SCREENSHOTS``: ``TRAINING_TAB_SCREENSHOTS=docs/images`` refreshes those of docs/ui-tab.md.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.cluster import LocalKube
from localkube.gates import close_gate, gate, open_gate

from tests.e2e.browser.chromium import Chromium, missing
from tests.e2e.conftest import Airflow, deploy
from tests.e2e.dag_scoped_auth import OUTSIDER, PRIVATE_DAG
from tests.e2e.test_airflow_components import wait_deferred
from tests.e2e.ui_dag_files.e2e_ui import GATE

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {"admin": "admin-e2e-password", OUTSIDER: "outsider-e2e-password"}
RUN_ID = "ui1"
TAB = f"/dags/{PRIVATE_DAG}/runs/{RUN_ID}/tasks/train/plugin/training"

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(missing() is not None, reason=f"no browser: {missing()}"),
]


@pytest.fixture(scope="module")
def ui_airflow(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """The four components with real logins: ``admin`` (admin) and ``outsider`` (viewer, refused the DAG)."""
    secrets = tmp_path_factory.mktemp("e2e-ui-auth") / "passwords.json"
    secrets.write_text(json.dumps(PASSWORDS))
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.e2e.dag_scoped_auth.DagScopedSimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"admin:admin,{OUTSIDER}:viewer",
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


def job_status_as(airflow: Airflow, user: str) -> int:
    """The HTTP status of ``GET /training/api/job`` for the tab's task instance, as ``user``."""
    saved = airflow.login, airflow.token
    airflow.login, airflow.token = (user, PASSWORDS[user]), None
    try:
        token = airflow.bearer_token()
    finally:
        airflow.login, airflow.token = saved
    query = f"dag_id={PRIVATE_DAG}&run_id={RUN_ID}&task_id=train&map_index=-1"
    req = urllib.request.Request(
        f"{airflow.base_url}/training/api/job?{query}", headers={"Authorization": f"Bearer {token}"}
    )
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

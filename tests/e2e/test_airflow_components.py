"""End to end with real Airflow 3 components (api-server, scheduler with LocalExecutor, dag-processor,
triggerer) as subprocesses, driven through the REST API, against localkube: a deferrable PyTorchJobOperator
defers to the triggerer, which streams the replica logs and resumes the task; a user marking the deferred
task failed makes the triggerer run ``TrainingJobTrigger.on_kill()``."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from localkube.cluster import LocalKube

from tests.e2e.conftest import ON_KILL_TIMEOUT, Airflow

pytestmark = pytest.mark.timeout(120)


def pytorch_job(kube: LocalKube, name: str) -> dict[str, Any] | None:
    """The PyTorchJob as the real client reads it from localkube, or None once it is gone."""
    api = client.CustomObjectsApi(config.new_client_from_config(str(kube.kubeconfig)))
    try:
        return api.get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    finally:
        api.api_client.close()


def trigger_events(text: str) -> list[str]:
    """The ``event`` of every JSON line of a task or trigger log file, a record of several lines (the replica
    lines of one read) as those lines."""
    return [
        part
        for line in text.splitlines()
        if line.startswith("{")
        for part in str(json.loads(line)["event"]).split("\n")
    ]


def wait_deferred(airflow: Airflow, dag_id: str, run_id: str) -> list[str]:
    """Wait until the task is deferred; returns the states seen on the way."""
    seen: list[str] = []

    def deferred() -> bool:
        state = airflow.task_instance(dag_id, run_id, "train")["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        assert state not in ("failed", "success", "upstream_failed"), seen
        return state == "deferred"

    airflow.wait(f"{dag_id}.train to defer", deferred, timeout=45)
    return seen


def test_deferrable_operator_runs_in_the_triggerer(airflow: Airflow, kube: LocalKube) -> None:
    airflow.trigger("e2e_train", "run1")

    seen = wait_deferred(airflow, "e2e_train", "run1")
    final = airflow.wait(
        "e2e_train.train to finish",
        lambda: {"success", "failed"} & {airflow.task_instance("e2e_train", "run1", "train")["state"]},
        timeout=45,
    )

    assert seen[-1] == "deferred"
    assert final == {"success"}, airflow.diagnostics()
    events = trigger_events(airflow.trigger_log("e2e_train", "run1", "train"))
    for line in ("epoch 1 loss 0.41", "epoch 2 loss 0.30", "model saved"):
        assert f"[master-0] {line}" in events
        assert f"[worker-0] {line}" in events
    assert any(e.startswith("PyTorchJob default/e2e-train is Succeeded") for e in events), events
    xcom = airflow.request("GET", "/dags/e2e_train/dagRuns/run1/taskInstances/train/xcomEntries/return_value")
    assert xcom["value"]["state"] == "Succeeded"
    assert xcom["value"]["name"] == "e2e-train"
    assert sorted(xcom["value"]["pods"]) == ["e2e-train-master-0", "e2e-train-worker-0"]
    job = pytorch_job(kube, "e2e-train")
    assert job is not None and job["metadata"]["uid"] == xcom["value"]["uid"]


def test_a_crash_looping_replica_fails_the_deferred_task_and_deletes_its_job(
    airflow: Airflow, kube: LocalKube
) -> None:
    """The trigger ends the wait once the Worker restarted past max_restarts (its job never fails by
    itself); the resumed task fails naming the replica, its exit code and last line, and deletes the job
    (on_finish_action="delete")."""
    airflow.trigger("e2e_crash_loop", "run1")

    wait_deferred(airflow, "e2e_crash_loop", "run1")
    final = airflow.wait(
        "e2e_crash_loop.train to finish",
        lambda: {"success", "failed"} & {airflow.task_instance("e2e_crash_loop", "run1", "train")["state"]},
        timeout=60,
    )

    assert final == {"failed"}, airflow.diagnostics()
    task_log = (airflow.task_dir("e2e_crash_loop", "run1", "train") / "attempt=1.log").read_text()
    # As many restarts as the pod had when the trigger first saw it past the limit (it may attach late).
    assert "replica Worker 0 (pod e2e-crash-loop-worker-0, container pytorch) keeps failing" in task_log
    assert "more than max_restarts=3; its last exit code was 2" in task_log
    assert "can't open file '/app/trian.py'" in task_log  # the Worker's last log line
    assert "Deleting PyTorchJob default/e2e-crash-loop (on_finish_action='delete')" in task_log
    airflow.wait("the job to be deleted", lambda: pytorch_job(kube, "e2e-crash-loop") is None, timeout=30)


def _kill_while_deferred(airflow: Airflow, kube: LocalKube, action: str) -> list[str]:
    """Run ``e2e_kill_<action>`` until deferred with its job running, mark the task failed, and wait for the
    trigger to finish; returns the trigger log's events."""
    dag_id, job_name = f"e2e_kill_{action}", f"e2e-kill-{action}"
    airflow.trigger(dag_id, "run1")
    wait_deferred(airflow, dag_id, "run1")
    airflow.wait(
        f"the trigger of {dag_id} to see its job running",
        lambda: any(" is Running" in e for e in trigger_events(airflow.trigger_log(dag_id, "run1", "train"))),
        timeout=30,
    )
    assert pytorch_job(kube, job_name) is not None

    airflow.mark_failed(dag_id, "run1", "train")
    airflow.wait(
        f"the trigger of {dag_id} to end",
        lambda: "trigger completed" in trigger_events(airflow.trigger_log(dag_id, "run1", "train")),
        timeout=ON_KILL_TIMEOUT + 10,
    )
    assert airflow.task_instance(dag_id, "run1", "train")["state"] == "failed"
    return trigger_events(airflow.trigger_log(dag_id, "run1", "train"))


# The watch hub's _SharedWatch.stop() (airflow_provider_training/watch.py) re-raises the CancelledError of its
# own watch task when the last subscriber leaves during a cancellation. That error replaces the triggerer's
# user-action CancelledError (message "__airflow_user_action__"), so Airflow skips on_kill() for a trigger
# that was alone on its watch. With stop() awaiting asyncio.wait({task}) instead, both tests pass.


def test_marking_a_deferred_task_failed_deletes_its_job(airflow: Airflow, kube: LocalKube) -> None:
    """Two parties delete the job of a deferred task a user marks failed, and either may be first: the API
    server's kill listener (as it commits the new state) and the trigger's on_kill (once the triggerer sees
    the task is no longer deferred). When the listener's delete reaches the trigger's watch first, the trigger
    ends with its job deleted instead of being cancelled (seen on a loaded machine). The job is deleted
    either way, and the logs name who deleted it."""
    events = _kill_while_deferred(airflow, kube, "delete")

    end = time.monotonic() + ON_KILL_TIMEOUT
    while pytorch_job(kube, "e2e-kill-delete") is not None and time.monotonic() < end:
        time.sleep(0.2)
    assert pytorch_job(kube, "e2e-kill-delete") is None
    listener = "marked failed while deferred: deleting PyTorchJob default/e2e-kill-delete"
    assert listener in airflow.output("api-server")
    if "Trigger cancelled by user action, invoking on_kill" in events:
        assert "PyTorchJob default/e2e-kill-delete deleted" in events or any(
            "already gone" in e for e in events
        ), events
    else:  # the listener's delete came first: the trigger saw its job go
        assert "Trigger fired event" in events, events


def test_marking_a_deferred_task_failed_keeps_its_job_with_on_kill_action_keep(
    airflow: Airflow, kube: LocalKube
) -> None:
    events = _kill_while_deferred(airflow, kube, "keep")

    assert "Trigger cancelled by user action, invoking on_kill" in events, events
    assert "Keeping PyTorchJob default/e2e-kill-keep (on_kill_action='keep')" in events
    job = pytorch_job(kube, "e2e-kill-keep")
    assert job is not None and job["metadata"].get("deletionTimestamp") is None


def test_the_training_tab_shows_the_finished_job_and_the_lines_its_trigger_saved(
    airflow: Airflow, kube: LocalKube
) -> None:
    """After the first test's run: the api-server's Training tab (docs/ui-tab.md) shows the job, reads the
    replica logs from the pods, and once the pods are gone the last lines the real trigger saved.

    Last in the module on purpose: the tab loads the Kubernetes client in the api-server, which makes its kill
    listener's delete fast enough to beat the triggerer's on_kill in the tests above (both delete the job;
    those tests assert that on_kill ran)."""
    from localkube.resources import PODS

    params = "dag_id=e2e_train&run_id=run1&task_id=train"

    def tab(path: str, extra: str = "") -> dict[str, Any]:
        with urllib.request.urlopen(
            f"{airflow.base_url}/training/api/{path}?{params}{extra}", timeout=30
        ) as r:
            return json.loads(r.read())

    view = tab("job")
    assert view["view"] == "job" and view["status"]["state"] == "Succeeded" and view["status"]["finished"]
    live = tab("logs", "&replica=master-0")
    assert live["source"] == "pod" and "model saved" in [line["text"] for line in live["lines"]]

    for pod in kube.store.list(PODS, "default"):
        if pod["metadata"]["name"].startswith("e2e-train-"):
            kube.call(kube.store.delete, PODS, "default", pod["metadata"]["name"])
    airflow.wait("the tab to see the pods gone", lambda: not tab("job")["pods"], timeout=30)
    saved = tab("logs", "&replica=master-0")
    assert saved["source"] == "saved" and saved["lines"][-1] == {"time": None, "text": "model saved"}

"""Every Kubeflow v1 kind, in sync and deferrable mode, end to end against localkube over HTTP.

One parametrized table (kind x mode) per scenario: success, failure with exit code and last log line,
Restarting then success, suspended (reported, ends at the deadline) and deleted while waiting.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import (
    KINDS,
    MODES,
    NAMESPACE,
    in_thread,
    job_or_none,
    jobs,
    make_context,
    manifest,
    pods_running,
    resource,
    run_operator,
    run_until_logged,
    wait_for,
    watching,
)

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine


def operator_for(case, job, **kwargs):
    cls = getattr(operators, f"{case.kind}Operator")
    return cls(task_id="train", job=job, check_interval=0.2, get_logs=True, log_replicas="all", **kwargs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_success(cluster, case, mode, capsys):
    script = {"default": {"duration": 0.1, "logs": ["epoch 1 loss 0.5", "saved model"]}}
    op = operator_for(case, manifest(case, script))

    result = run_operator(op, make_context(), mode)

    assert result["state"] == "Succeeded"
    assert result["kind"] == case.kind and result["api_version"] == "kubeflow.org/v1"
    assert result["namespace"] == NAMESPACE and result["uid"]
    assert set(result["replicas"]) == set(case.replicas)
    assert any(name.startswith(result["name"]) for name in result["pods"])
    assert result["duration_seconds"] is not None and result["start"]
    assert "saved model" in capsys.readouterr().out  # replica logs streamed into the task log


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_failure_names_exit_code_and_last_log_line(cluster, case, mode):
    script = {
        "default": {"duration": 0.3},
        case.master: {
            "duration": 0.05,
            "exit_code": 3,
            "logs": ["loading shards", "RuntimeError: shard 7 is corrupt"],
        },
    }
    op = operator_for(case, manifest(case, script))

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 3" in message
    assert "RuntimeError: shard 7 is corrupt" in message
    assert f"{case.master.lower()}" in message.lower()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_restarting_is_shown_then_success(cluster, case, mode, capsys):
    # The first run is killed once the wait saw the job Running; the job ends once it saw it Restarting.
    killed, ended = f"restart-killed-{case}-{mode}", f"restart-ended-{case}-{mode}"
    attempts = [{"duration": 0, "exit_code": 137, "logs": ["killed"], "gate": killed}, {"duration": 0}]
    script = {"default": {"duration": 0, "gate": ended}, case.restarting: {"attempts": attempts}}
    if case.restarting == case.master:
        attempts[1]["gate"] = ended
    op = operator_for(case, manifest(case, script, restart_policy="ExitCode"))

    def run() -> dict:
        return run_operator(op, make_context(), mode)

    result, out = run_until_logged(capsys, run, (" is Running", killed), (" is Restarting", ended))

    assert result["state"] == "Succeeded"
    assert out.index(" is Running") < out.index(" is Restarting") < out.index(" is Succeeded")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_suspended_is_reported_and_ends_at_the_deadline(cluster, case, mode, capsys):
    job = manifest(case, {"default": {"duration": 0.1}}, run_policy={"suspend": True})
    op = operator_for(case, job, execution_timeout=timedelta(seconds=1))
    context = make_context()

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, context, mode)

    assert failure.value.status == "timeout"
    assert "suspended" in str(failure.value)
    assert failure.value.event["job_status"]["state"] == "Suspended"
    assert "is suspended" in capsys.readouterr().out
    name = failure.value.event["job"]["name"]
    wait_for(lambda: job_or_none(cluster, case, name) is None)  # a timed-out job is deleted


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_deleted_while_waiting_is_a_clear_failure(cluster, case, mode):
    op = operator_for(case, manifest(case, {"default": {"duration": None}}))
    context = make_context()
    before, since = _names(cluster, case), len(cluster.requests)

    def delete_when_running():
        name = wait_for(
            lambda: next((n for n in _names(cluster, case) - before if pods_running(cluster, n)), None)
        )
        wait_for(lambda: watching(cluster, case, since))
        cluster.store.delete(resource(cluster, case), NAMESPACE, name)

    deleter, outcome = in_thread(delete_when_running)
    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, context, mode)
    deleter.join()

    assert "error" not in outcome
    assert failure.value.status == "deleted"
    assert "was deleted while waiting" in str(failure.value)


def _names(cluster, case):
    return {j["metadata"]["name"] for j in jobs(cluster, case)}

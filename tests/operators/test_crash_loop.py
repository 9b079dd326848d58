"""A replica that keeps failing fails the task (``max_restarts``), even when its job never fails by itself.

The jobs here have no ``runPolicy.backoffLimit`` (as hand-written manifests often do): under ``OnFailure`` the
Training Operator then restarts a failing replica for ever, and only the waiter's limit ends the task.
"""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import (
    KIND_BY_NAME,
    MODES,
    NAMESPACE,
    job_or_none,
    make_context,
    manifest,
    resource,
    run_operator,
    run_until_logged,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
PYTORCH = KIND_BY_NAME["PyTorchJob"]
NO_BACKOFF_LIMIT = {"backoffLimit": None}  # the builders' default backoffLimit left out
WRONG_PATH = "python: can't open file '/app/trian.py': [Errno 2] No such file or directory"
# The Worker's script path is wrong: it exits 2 on every run, restarted in place (OnFailure), for ever.
CRASH_LOOPING_WORKER = {
    "default": {"duration": None},
    "Worker": {"duration": 0.02, "exit_code": 2, "logs": ["starting run {attempt}", WRONG_PATH]},
}


def pytorch(script, *, restart_policy="OnFailure", **kwargs):
    kwargs.setdefault("check_interval", 0.2)
    job = manifest(PYTORCH, script, restart_policy=restart_policy, run_policy=NO_BACKOFF_LIMIT)
    return PyTorchJobOperator(task_id="train", job=job, **kwargs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["delete", "keep"])
def test_a_crash_looping_replica_fails_the_task_naming_it(cluster, mode, action):
    op = pytorch(CRASH_LOOPING_WORKER, on_finish_action=action, log_replicas="all")

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)

    text = str(failure.value)
    name = op._job_ref.name
    assert failure.value.status == "failed"
    assert (
        f"replica Worker 0 (pod {name}-worker-0, container pytorch) keeps failing: restarted 4 times" in text
    )
    assert "more than max_restarts=3; its last exit code was 2" in text  # the operator's default limit
    assert f"worker-0 (pod {name}-worker-0, container pytorch): exit code 2" in text
    assert f"| {WRONG_PATH}" in text  # its last log lines
    if action == "delete":  # deleted as a failed job is, by the worker that raised
        wait_for(lambda: job_or_none(cluster, PYTORCH, name) is None)
    else:
        job = job_or_none(cluster, PYTORCH, name)
        assert job is not None and job["metadata"]["uid"] == op._job_ref.uid
        cluster.store.delete(resource(cluster, PYTORCH), NAMESPACE, name)


def test_replicas_the_operator_replaces_count_their_earlier_pods(cluster):
    """Under ``ExitCode`` a killed replica (exit code 137) is deleted and created again under its name, each
    pod with a restart count of 0: the restarts are the pods replaced."""
    script = {"default": {"duration": None}, "Master": {"duration": 0.02, "exit_code": 137}}
    op = pytorch(script, restart_policy="ExitCode", execution_timeout=timedelta(seconds=90))

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), "sync")

    assert failure.value.status == "failed"
    name = op._job_ref.name
    assert (
        f"replica Master 0 (pod {name}-master-0, container pytorch) keeps failing: restarted 4 times"
        in str(failure.value)
    )
    assert "its last exit code was 137" in str(failure.value)


@pytest.mark.parametrize("limit", [None, 3])
def test_without_a_limit_a_crash_looping_replica_is_waited_for(cluster, capsys, limit):
    """``max_restarts=None``: the Master fails five times, more than the default limit, and the task still
    waits: its sixth run, held at a gate, is streamed to the task log before the gate opens and it
    succeeds. The same job under the default limit fails at the Master's fourth restart."""
    gate = "crash-loop-unlimited"
    failing = [{"exit_code": 1, "duration": 0.02, "logs": ["run {attempt} fails"]}] * 5
    last = {"exit_code": 0, "duration": 0, "gate": gate, "logs": ["run {attempt} at the gate"]}
    script = {"default": {"duration": None}, "Master": {"attempts": [*failing, last]}}
    op = pytorch(script, max_restarts=limit)
    run = functools.partial(run_operator, op, make_context(), "sync")

    if limit is not None:
        with pytest.raises(TrainingJobError, match="restarted 4 times, more than max_restarts=3"):
            run_until_logged(capsys, run, ("run 5 at the gate", gate))
        return
    result, printed = run_until_logged(capsys, run, ("run 5 at the gate", gate))

    assert result["state"] == "Succeeded"
    assert "run 4 fails" in printed and "run 5 at the gate" in printed
    assert "keeps failing" not in printed

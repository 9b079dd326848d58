"""Issue 27, point 7: a worker whose clock is 120 s ahead of the API server's.

localkube's ``clock_offset`` puts its clock 120 s behind this machine's where a client compares it with its
own: ``metadata.creationTimestamp`` and the ``Date`` header. The provider measures a job's age on the server's
clock, so a fresh job is not "never picked up" (no status within ``status_grace_period``) nor late to start
(``startup_timeout``) the moment it is created; a job that is never picked up still fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from localkube.cluster import LocalKube

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KIND_BY_NAME, MODES, make_context, manifest, run_operator, serve

pytestmark = pytest.mark.timeout(120)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
SKEW = -120.0  # the server's clock, behind this machine's


@pytest.fixture(scope="module")
def behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    with serve(tmp_path_factory, clock_offset=SKEW) as kube:
        yield kube


@pytest.fixture(scope="module")
def bare_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """No controller: nothing ever writes a job's status."""
    with serve(tmp_path_factory, controllers=[], clock_offset=SKEW) as kube:
        yield kube


@pytest.mark.parametrize("mode", MODES)
def test_a_job_that_starts_normally_is_not_failed_as_never_picked_up(behind, mode):
    # The first read of a job is its create's answer, with no status yet: 120 s old on this machine's clock,
    # past the 60 s grace; 0 s old on the server's.
    op = PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, {"default": {"duration": 0.5}}), check_interval=0.1
    )

    result = run_operator(op, make_context(), mode)

    assert result["state"] == "Succeeded", result


@pytest.mark.parametrize("mode", MODES)
def test_a_job_that_starts_normally_is_not_late_to_start(behind, monkeypatch, mode):
    # Its replica pods are Unschedulable for 2 s (localkube's script): every check meanwhile finds the job
    # picked up but not started, 120 s after its creationTimestamp on this machine's clock.
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "600")  # this test is about startup only
    script = {"default": {"duration": 0.5, "pending": "Unschedulable", "pending_for": 2}}
    op = PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, script), startup_timeout=60, check_interval=0.1
    )

    result = run_operator(op, make_context(), mode)

    assert result["state"] == "Succeeded", result


@pytest.mark.parametrize("mode", MODES)
def test_a_job_never_picked_up_still_fails_and_says_how_long_it_waited(bare_behind, monkeypatch, mode):
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "1")
    op = PyTorchJobOperator(task_id="train", job=manifest(PYTORCH, {}), check_interval=0.1)

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)

    message = str(failure.value)
    assert "was never picked up" in message, message
    age = int(re.search(r"has no status (\d+)s after creation", message).group(1))  # type: ignore[union-attr]
    assert age < -SKEW / 2, message  # on the server's clock, not this machine's


@pytest.mark.parametrize("mode", MODES)
def test_a_job_never_started_still_fails_after_startup_timeout(behind, monkeypatch, mode):
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "600")
    script = {"default": {"duration": 0.5, "pending": "Unschedulable"}}  # held until deleted
    op = PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, script), startup_timeout=1, check_interval=0.1
    )

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)

    assert failure.value.status == "timeout"
    assert "no replica pod started within 1s" in str(failure.value)

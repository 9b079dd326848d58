from __future__ import annotations

import copy
from datetime import timedelta

import pendulum
import pytest

from airflow_provider_training.kinds import JobState, ReplicaCounts, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING, STATUS_GRACE_SECONDS
from tests.kinds import recorded

CREATED = pendulum.parse(recorded.CREATED_AT)


def read(obj, **kwargs):
    return get_kind(obj["kind"]).read_status(obj, {}, **kwargs)


def test_tf_succeeded_while_ps_still_runs():
    status = read(recorded.TF_SUCCEEDED_PS_RUNNING)
    assert status.state is JobState.SUCCEEDED
    assert status.reason == "TFJobSucceeded"
    assert status.message == "TFJob default/dist-mnist successfully completed."
    assert status.replicas == {
        "PS": ReplicaCounts(desired=1, active=1),
        "Worker": ReplicaCounts(desired=2, succeeded=2),
    }
    assert status.start == pendulum.datetime(2026, 3, 2, 10, 0, 2)
    assert status.end == pendulum.datetime(2026, 3, 2, 10, 4, 0)
    assert status.duration_seconds == 238
    assert not status.stalled


def test_pytorch_restarting():
    status = read(recorded.PYTORCH_RESTARTING)
    assert status.state is JobState.RESTARTING
    assert status.reason == "PyTorchJobRestarting"
    assert "1 Worker replica(s) failed" in status.message
    assert status.replicas["Worker"] == ReplicaCounts(desired=3, active=2, failed=1)
    assert status.end is None


def test_mpi_failed_keeps_the_operators_doubled_reason():
    status = read(recorded.MPI_FAILED)
    assert status.state is JobState.FAILED
    assert status.reason == "MPIJobMPIJobFailed"
    assert status.message == "MPIJob default/tensorflow-mnist has failed"
    assert status.replicas["Launcher"] == ReplicaCounts(desired=1, failed=1)


def test_mx_succeeded_followed_by_running_is_succeeded():
    """Issue #1650: the last condition is Running=True, but Succeeded=True decides."""
    status = read(recorded.MX_SUCCEEDED_THEN_RUNNING)
    assert status.state is JobState.SUCCEEDED
    assert status.reason == "MXJobSucceeded"


def test_failed_wins_over_succeeded():
    status = read(recorded.XGB_FAILED_AND_SUCCEEDED)
    assert status.state is JobState.FAILED
    assert status.reason == "XGBoostJobFailed"
    assert "backoff limit" in status.message


def test_suspended():
    status = read(recorded.PADDLE_SUSPENDED)
    assert status.state is JobState.SUSPENDED
    assert status.reason == "PaddleJobSuspended"
    assert not status.state.terminal
    assert status.replicas["Worker"] == ReplicaCounts(desired=2)


def test_resumed_job_is_pending_again():
    status = read(recorded.PADDLE_RESUMED)
    assert status.state is JobState.PENDING
    assert status.reason == "PaddleJobCreated"
    assert not status.stalled


def test_running_with_replica_selector_in_status():
    status = read(recorded.JAX_RUNNING)
    assert status.state is JobState.RUNNING
    assert status.replicas == {"Worker": ReplicaCounts(desired=2, active=2)}


def test_condition_status_false_is_never_true():
    """ "False" is a truthy string; only status == "True" counts."""
    obj = copy.deepcopy(recorded.JAX_RUNNING)
    obj["status"]["conditions"].insert(1, recorded.cond("Failed", "False", "JAXJobFailed"))
    obj["status"]["conditions"].append(recorded.cond("Succeeded", "Unknown", "JAXJobSucceeded"))
    assert read(obj).state is JobState.RUNNING


def test_only_false_conditions_is_pending_without_reason():
    obj = copy.deepcopy(recorded.JAX_RUNNING)
    obj["status"]["conditions"] = [recorded.cond("Running", "False", "JAXJobRunning")]
    status = read(obj)
    assert (status.state, status.reason, status.stalled) == (JobState.PENDING, "", False)


def test_empty_status_within_grace_period_is_plain_pending():
    status = read(recorded.PYTORCH_NO_STATUS, now=CREATED + timedelta(seconds=STATUS_GRACE_SECONDS - 1))
    assert status.state is JobState.PENDING
    assert not status.stalled
    assert status.reason == ""
    assert status.replicas == {"Worker": ReplicaCounts(desired=2)}


def test_empty_status_after_grace_period_says_the_operator_is_not_running():
    status = read(recorded.PYTORCH_NO_STATUS, now=CREATED + timedelta(seconds=STATUS_GRACE_SECONDS + 5))
    assert status.state is JobState.PENDING
    assert status.stalled
    assert status.reason == OPERATOR_NOT_RUNNING
    assert status.message.startswith("PyTorchJob fresh has no status 65s after creation")
    assert "pytorchjob-controller) seems not to be running" in status.message
    assert "PyTorchJobFailedValidation" in status.message
    assert "kueue.x-k8s.io/multikueue" in status.message


def test_mpi_empty_status_names_failed_validation_and_defaults_workers_to_zero():
    status = read(recorded.MPI_NO_STATUS, now=CREATED + timedelta(minutes=5))
    assert status.stalled
    assert "MPIJobFailedValidation" in status.message
    assert status.replicas == {"Launcher": ReplicaCounts(desired=1), "Worker": ReplicaCounts(desired=0)}


def test_grace_period_is_a_parameter():
    status = read(recorded.PYTORCH_NO_STATUS, now=CREATED + timedelta(seconds=10), grace_seconds=5)
    assert status.stalled


def test_default_now_is_the_clock():
    """Created in the past (2026-03-02) and never given a status: stalled by the real clock."""
    assert pendulum.now("UTC") > CREATED + timedelta(seconds=STATUS_GRACE_SECONDS)
    assert read(recorded.PYTORCH_NO_STATUS).stalled


def test_lower_case_replica_type_in_spec_is_read_in_the_kinds_casing():
    obj = copy.deepcopy(recorded.TF_SUCCEEDED_PS_RUNNING)
    obj["spec"]["tfReplicaSpecs"] = {"ps": recorded.replica(1), "worker": recorded.replica(2)}
    assert set(read(obj).replicas) == {"PS", "Worker"}


def test_status_round_trips_through_dict():
    from airflow_provider_training.kinds import JobStatus

    status = read(recorded.TF_SUCCEEDED_PS_RUNNING)
    assert JobStatus.from_dict(status.to_dict()) == status


def test_non_kubeflow_object_is_refused():
    with pytest.raises(ValueError, match=r"not a kubeflow\.org/v1 job kind"):
        get_kind("PyTorchJob").read_status({"kind": "Deployment"}, {})

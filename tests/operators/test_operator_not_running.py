"""Issue 3: a job that nothing runs (localkube without the kind's controller) keeps an empty status; after
``[training] status_grace_period`` (here shortened to 1 s) the wait says its operator seems not to be running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from localkube.cluster import LocalKube

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError, TrainingJobSensorError
from airflow_provider_training.sensors import PyTorchJobSensor
from airflow_provider_training.triggers.training import TrainingJobTrigger
from tests.operators.harness import (
    KIND_BY_NAME,
    MODES,
    NAMESPACE,
    first_event,
    make_context,
    manifest,
    resource,
    run_operator,
    serve,
)

pytestmark = pytest.mark.timeout(55)  # below the 60 s default grace: only the shortened one ends these
PYTORCH = KIND_BY_NAME["PyTorchJob"]
NOT_RUNNING = "the training operator for PyTorchJob (pytorchjob-controller) seems not to be running"


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube with the pod runtime but no controller: nothing ever writes a job's status."""
    with serve(tmp_path_factory, controllers=[]) as kube:
        yield kube


@pytest.fixture
def one_second_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "1")


@pytest.mark.parametrize("mode", MODES)
def test_operator_fails_saying_the_training_operator_is_not_running(bare_cluster, one_second_grace, mode):
    op = PyTorchJobOperator(task_id="train", job=manifest(PYTORCH, {}), check_interval=0.1)

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), mode)

    message = str(failure.value)
    assert failure.value.status == "error"
    assert failure.value.event["job_status"]["reason"] == "OperatorNotRunning"
    assert "was never picked up" in message and NOT_RUNNING in message
    job = bare_cluster.store.get(resource(bare_cluster, PYTORCH), NAMESPACE, op._job_ref.name)
    assert not job.get("status")  # indeed nothing wrote one


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
def test_sensor_fails_the_same_way(bare_cluster, one_second_grace, mode):
    name = f"nobody-runs-{mode}"
    bare_cluster.store.create(resource(bare_cluster, PYTORCH), NAMESPACE, manifest(PYTORCH, {}, name=name))
    sensor = PyTorchJobSensor(task_id="wait", job_name=name, poke_interval=0.1, timeout=20)

    with pytest.raises(TrainingJobSensorError, match="seems not to be running"):
        run_operator(sensor, make_context(), "sync" if mode == "poke" else mode)


def test_trigger_grace_period_parameter(bare_cluster):
    bare_cluster.store.create(
        resource(bare_cluster, PYTORCH), NAMESPACE, manifest(PYTORCH, {}, name="nobody-runs-trigger")
    )
    trigger = TrainingJobTrigger(
        kind="PyTorchJob",
        api_version="kubeflow.org/v1",
        job_name="nobody-runs-trigger",
        namespace=NAMESPACE,
        status_grace_period=1.0,
        check_interval=0.1,
    )

    event = first_event(trigger)

    assert event["status"] == "error" and NOT_RUNNING in event["message"]
    assert event["job_status"]["stalled"] is True

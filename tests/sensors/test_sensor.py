"""TrainingJobSensor and the per-kind sensors against localkube, in poke and deferrable mode."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from airflow_provider_training import sensors
from airflow_provider_training.kinds import get_kind
from airflow_provider_training.results import TrainingJobSensorError
from airflow_provider_training.sensors import TrainingJobSensor
from tests.operators.harness import (
    KINDS,
    MODES,
    NAMESPACE,
    first_event,
    job_or_none,
    make_context,
    manifest,
    resource,
    run_operator,
    sent_since,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine


def create(cluster, case, name, script):
    cluster.store.create(resource(cluster, case), NAMESPACE, manifest(case, script, name=name))


def sensor_for(case, name, **kwargs):
    cls = getattr(sensors, f"{case.kind}Sensor")
    return cls(task_id="wait", job_name=name, poke_interval=0.1, timeout=20, **kwargs)


def _mode_name(case, mode, what):
    return f"{what}-{case.kind.lower()}-{mode[:4]}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_waits_for_success(cluster, case, mode):
    name = _mode_name(case, mode, "ok")
    create(cluster, case, name, {"default": {"duration": 0.3}})

    result = run_operator(sensor_for(case, name), make_context(), mode)

    assert result["state"] == "Succeeded" and result["name"] == name  # the XCom value, in both modes
    assert result["pods"] and result["replicas"]


@pytest.mark.parametrize("mode", MODES)
def test_failure_names_exit_code_and_log_line(cluster, mode):
    case = KINDS[1]
    name = f"sensor-fails-{mode[:4]}"
    create(
        cluster, case, name, {"default": {"duration": 0.05, "exit_code": 4, "logs": ["NaN loss at step 12"]}}
    )

    with pytest.raises(TrainingJobSensorError) as failure:
        run_operator(sensor_for(case, name), make_context(), mode)

    assert "exit code 4" in str(failure.value) and "NaN loss at step 12" in str(failure.value)


def failed_job(cluster, case, name):
    """A job that has failed already: the sensor's first check finds it so, in every mode."""
    create(cluster, case, name, {"default": {"duration": 0.05, "exit_code": 4}})
    wait_for(lambda: _has_true(job_or_none(cluster, case, name), "Failed"))


def _has_true(job, condition):
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == condition and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize("flag", ["soft_fail", "never_fail"])
@pytest.mark.parametrize("mode", MODES)
def test_a_job_failed_before_the_first_check_skips_with_soft_fail_or_never_fail(cluster, mode, flag):
    case = KINDS[1]
    name = f"sensor-{flag[:5].replace('_', '')}-{mode[:4]}"
    failed_job(cluster, case, name)

    with pytest.raises(AirflowSkipException, match=flag):
        run_operator(sensor_for(case, name, **{flag: True}), make_context(), mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_job_failed_before_the_first_check_fails_the_sensor_without_either(cluster, mode):
    case = KINDS[1]
    name = f"sensor-hardfail-{mode[:4]}"
    failed_job(cluster, case, name)

    with pytest.raises(TrainingJobSensorError, match="exit code 4"):
        run_operator(sensor_for(case, name), make_context(), mode)


def test_a_sensor_timing_out_while_deferred_skips_with_soft_fail(cluster):
    case = KINDS[1]
    create(cluster, case, "sensor-soft-later", {"default": {"duration": None}})  # runs until deleted
    sensor = sensors.PyTorchJobSensor(
        task_id="wait", job_name="sensor-soft-later", poke_interval=0.1, timeout=1, soft_fail=True
    )
    sensor.deferrable = True
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(make_context())  # not finished: it defers, whatever the timing

    event = first_event(deferred.value.trigger)

    assert event["status"] == "timeout"
    with pytest.raises(AirflowSkipException, match="soft_fail"):
        sensor.resume_execution("execute_complete", {"event": event}, make_context())
    cluster.store.delete(resource(cluster, case), NAMESPACE, "sensor-soft-later")


def test_poke_reads_the_status_once_and_waits_for_a_missing_job(cluster):
    case = KINDS[1]
    sensor = TrainingJobSensor(task_id="wait", kind="PyTorchJob", job_name="sensor-later", poke_interval=0.1)
    path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs/sensor-later"

    before = len(cluster.requests)
    assert sensor.poke(make_context()) is False  # not there yet
    create(cluster, case, "sensor-later", {"default": {"duration": None}})
    assert sensor.poke(make_context()) is False  # running, target Succeeded

    reads = [r for r in cluster.requests[before:] if r.path == path]
    assert [r.method for r in reads] == ["GET", "GET"]
    assert len(cluster.requests) - before == 2  # one status read per poke, nothing else
    wait_for(lambda: _has_true(job_or_none(cluster, case, "sensor-later"), "Running"))  # at its own pace
    running = TrainingJobSensor(
        task_id="wait", kind="PyTorchJob", job_name="sensor-later", target_state="Running"
    )
    done = running.poke(make_context())
    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value["state"] == "Running" and done.xcom_value["name"] == "sensor-later"
    cluster.store.delete(resource(cluster, case), NAMESPACE, "sensor-later")


def test_generic_sensor_needs_a_kind():
    with pytest.raises(ValueError, match="kind is required"):
        TrainingJobSensor(task_id="wait", job_name="x")


def test_deferrable_sensor_on_a_finished_job_does_not_defer(cluster):
    case = KINDS[1]
    create(cluster, case, "sensor-done", {"default": {"duration": 0.05}})
    sensor = sensor_for(case, "sensor-done", deferrable=True)
    wait_for(lambda: sensor.poke(make_context()))  # until it finished

    result = sensor.execute(make_context())  # no TaskDeferred

    assert result["state"] == "Succeeded" and result["name"] == "sensor-done"


def test_killing_a_deferred_sensor_keeps_the_job(cluster):
    case = KINDS[1]
    create(cluster, case, "sensor-killed", {"default": {"duration": None}})
    with pytest.raises(TaskDeferred) as deferred:
        sensor_for(case, "sensor-killed", deferrable=True).execute(make_context())
    trigger = deferred.value.trigger

    asyncio.run(trigger.on_kill())  # the user marks the deferred sensor failed

    assert trigger.job_wait.finish.on_kill_action == "keep"
    assert job_or_none(cluster, case, "sensor-killed") is not None  # the sensor only watched it
    cluster.store.delete(resource(cluster, case), NAMESPACE, "sensor-killed")


def test_poke_and_deferrable_mode_return_the_same_result(cluster):
    case = KINDS[1]
    create(cluster, case, "sensor-same", {"default": {"duration": 0.05}})
    wait_for(lambda: sensor_for(case, "sensor-same").poke(make_context()))  # until it finished

    results = {  # a finished job is answered without deferring
        mode: sensor_for(case, "sensor-same", deferrable=mode == "deferrable").execute(make_context())
        for mode in MODES
    }

    assert results["sync"] == results["deferrable"]
    assert results["sync"]["state"] == "Succeeded" and results["sync"]["duration_seconds"] is not None


@pytest.mark.parametrize("mode", MODES)
def test_a_finished_job_is_concluded_in_one_step_with_no_watch(cluster, mode):
    """A poke, or a deferrable sensor's first check, on a job that has succeeded: one hook reads the job and
    lists its pods by label (for the result's pod names), and that is all: no watch, no LIST of the
    namespace's pods (which a watch would start with)."""
    case = KINDS[1]
    name = f"sensor-concluded-{mode[:4]}"
    create(cluster, case, name, {"default": {"duration": 0.05}})
    wait_for(lambda: _has_true(job_or_none(cluster, case, name), "Succeeded"))
    sensor = sensor_for(case, name, deferrable=mode == "deferrable")
    before = len(cluster.requests)

    result = sensor.execute(make_context())  # poke mode: its first poke is done

    assert result["state"] == "Succeeded" and len(result["pods"]) == 2
    jobs = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
    selector = get_kind("PyTorchJob").pod_selector(name)
    assert sent_since(cluster, before) == [
        f"GET {jobs}/{name}",
        f"GET /api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}",
    ]


def test_a_failed_job_is_explained_with_no_watch(cluster):
    """A poke on a failed job: its explanation (events, the failing replicas' log tails) is read once, by
    name and label; nothing is watched."""
    case = KINDS[1]
    failed_job(cluster, case, "sensor-explained")
    before = len(cluster.requests)

    with pytest.raises(TrainingJobSensorError, match="exit code 4"):
        sensor_for(case, "sensor-explained").poke(make_context())

    sent = sent_since(cluster, before)
    assert not [line for line in sent if "watch=" in line]
    pods = f"GET /api/v1/namespaces/{NAMESPACE}/pods?"
    assert [line for line in sent if line.startswith(pods)] == [
        f"{pods}labelSelector={get_kind('PyTorchJob').pod_selector('sensor-explained')}"
    ]
    assert len(sent) <= 8, sent  # the job, its pods, its events and each failing replica's events and log

"""Every public operator and sensor parameter is checked before anything is sent: a bad value is refused with
an error naming the parameter and what was expected, and localkube counted no request at all.

Plain parameters are refused when the DAG is parsed (the constructor); templated ones (``job_name``,
``namespace``) and those that need the kind (``log_replicas`` lists) once rendered, in ``execute``.
"""

from __future__ import annotations

import pytest

from airflow_provider_training import operators, sensors
from airflow_provider_training.specs import SpecError
from tests.operators.harness import KIND_BY_NAME, make_context, manifest

pytestmark = pytest.mark.timeout(30)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
QUICK = {"default": {"duration": 0.05}}

# (parameter, value, text the error must contain besides the parameter's name)
PARSE_TIME_BAD = [
    ("check_interval", "fast", "number of seconds > 0"),
    ("check_interval", 0, "number of seconds > 0"),
    ("check_interval", -1.5, "number of seconds > 0"),
    ("check_interval", True, "number of seconds > 0"),
    ("check_interval", None, "number of seconds > 0"),
    ("startup_timeout", "ten", "number of seconds > 0 or None"),
    ("startup_timeout", 0, "number of seconds > 0 or None"),
    ("log_replicas", 123, "list of replica type names"),
    ("log_replicas", "workers", "one of 'deciding', 'all', 'master'"),
    ("log_replicas", [], "non-empty list"),
    ("log_replicas", ["Worker", 5], "list of replica type names"),
    ("max_log_streams", 0, "positive whole number of log streams, or None"),
    ("max_log_streams", "100", "positive whole number of log streams, or None"),
    ("max_log_streams", True, "positive whole number of log streams, or None"),
    ("labels", {"team": 5}, "must be a string"),
    ("labels", {"bad key": "a b"}, "not a valid label key"),
    ("labels", {"team": "a b"}, "not a valid label value"),
    ("labels", {"team": "x" * 64}, "at most 63 characters"),
    ("labels", {"team": "-ml"}, "starting and ending with a letter or digit"),
    ("labels", {"x" * 64: "v"}, "at most 63 characters"),
    ("labels", {"Example.COM/team": "ml"}, "DNS-1123 subdomain"),
    ("labels", {"/team": "ml"}, "DNS-1123 subdomain"),
    ("labels", {5: "ml"}, "must be a string"),
    ("labels", "team=ml", "mapping of strings to strings"),
    ("annotations", {"bad key": "v"}, "not a valid annotation key"),
    ("annotations", {"note": 5}, "must be a string"),
    ("annotations", {"note": "x" * (256 * 1024)}, "at most 262144 bytes"),
    ("annotations", ["note"], "mapping of strings to strings"),
    ("get_logs", "yes", "True or False"),
    ("deferrable", 1, "True or False"),
    ("wait_until", "Failed", "one of 'Succeeded', 'Running', None"),
    ("wait_until", ["Succeeded"], "one of 'Succeeded', 'Running', None"),
    ("action_if_job_exists", "timestamp", "one of 'reattach', 'recreate', 'fail'"),
    ("on_finish_action", "delete_pod", "one of 'keep', 'delete', 'delete_succeeded'"),
    ("on_kill_action", "keep_pod", "one of 'delete', 'keep'"),
    ("kind", 5, "non-empty string or None"),
    ("api_version", "", "non-empty string or None"),
    ("kubernetes_conn_id", 7, "non-empty string or None"),
    ("max_restarts", -1, "whole number >= 0 of restarts of one replica, or None"),
    ("max_restarts", 2.5, "whole number >= 0 of restarts of one replica, or None"),
    ("max_restarts", "3", "whole number >= 0 of restarts of one replica, or None"),
    ("max_restarts", True, "whole number >= 0 of restarts of one replica, or None"),
]


def _id(case):
    return f"{case[0]}={case[1]!r}"[:40]


@pytest.mark.parametrize("param,value,expected", PARSE_TIME_BAD, ids=map(_id, PARSE_TIME_BAD))
def test_operator_refuses_a_bad_parameter_when_parsed(cluster, param, value, expected):
    before = len(cluster.requests)
    with pytest.raises(ValueError) as error:
        operators.TrainingJobOperator(task_id="train", job=manifest(PYTORCH, QUICK), **{param: value})

    assert param in str(error.value) and expected in str(error.value)
    assert len(cluster.requests) == before


def test_operator_takes_good_labels_and_annotations():
    op = operators.PyTorchJobOperator(
        task_id="train",
        job={},
        labels={"team": "ml", "example.com/owner": "a.b_c-d", "empty": "", "K": "V"},
        annotations={"example.com/note": "any text, even with spaces: ok"},
        startup_timeout=None,
        check_interval=1,
        log_replicas=["worker", "Master"],
    )
    assert op.labels["example.com/owner"] == "a.b_c-d" and op.startup_timeout is None
    assert op.check_interval == 1.0 and op.log_replicas == ["worker", "Master"]


def test_master_is_the_old_name_of_the_deciding_replica():
    assert operators.PyTorchJobOperator(task_id="t", job={}).log_replicas == "deciding"
    assert operators.PyTorchJobOperator(task_id="t", job={}, log_replicas="master").log_replicas == "deciding"


def test_job_is_required():
    with pytest.raises(ValueError, match="job is required"):
        operators.TrainingJobOperator(task_id="train", job=None)


SENSOR_PARSE_TIME_BAD = [
    ("target_state", "Failed", "one of 'Succeeded', 'Running'"),
    ("log_replicas", 123, "list of replica type names"),
    ("max_log_streams", 2.5, "positive whole number of log streams, or None"),
    ("get_logs", "no", "True or False"),
    ("deferrable", "yes", "True or False"),
    ("kind", 5, "non-empty string or None"),
    ("kubernetes_conn_id", "", "non-empty string or None"),
]


@pytest.mark.parametrize("param,value,expected", SENSOR_PARSE_TIME_BAD, ids=map(_id, SENSOR_PARSE_TIME_BAD))
def test_sensor_refuses_a_bad_parameter_when_parsed(cluster, param, value, expected):
    before = len(cluster.requests)
    kwargs = {"kind": "PyTorchJob", param: value}
    with pytest.raises(ValueError) as error:
        sensors.TrainingJobSensor(task_id="wait", job_name="job", **kwargs)

    assert param in str(error.value) and expected in str(error.value)
    assert len(cluster.requests) == before


# -- in execute: the rendered templated fields, and what needs the kind -------------------------------------

NAMESPACE_EXPECTED = "DNS-1123 label"
EXECUTE_TIME_BAD = [
    ("namespace", "Bad_NS", NAMESPACE_EXPECTED),
    ("namespace", "n" * 70, NAMESPACE_EXPECTED),
    ("namespace", "a/b", NAMESPACE_EXPECTED),
    ("namespace", "", NAMESPACE_EXPECTED),
    ("namespace", "-ns", NAMESPACE_EXPECTED),
    ("namespace", 5, NAMESPACE_EXPECTED),
    ("job_name", 5, "non-empty string or None"),
    ("job_name", "Bad_Name", "DNS-1035 label"),
    (
        "log_replicas",
        ["Wroker"],
        "PyTorchJob has no replica type 'Wroker'; its replica types are Master, Worker",
    ),
    ("kind", "TorchJob", "unknown training job kind 'TorchJob'"),
    ("api_version", "kubeflow.org/v9", "PyTorchJob is not known in apiVersion 'kubeflow.org/v9'"),
]


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
@pytest.mark.parametrize("param,value,expected", EXECUTE_TIME_BAD, ids=map(_id, EXECUTE_TIME_BAD))
def test_operator_refuses_a_bad_value_in_execute_before_any_request(cluster, param, value, expected, mode):
    kwargs = {"kind": "PyTorchJob", param: value}
    job = manifest(PYTORCH, QUICK)
    job.pop("kind") if param == "kind" else None  # the kind= parameter names it alone
    op = operators.TrainingJobOperator(task_id="train", job=job, deferrable=mode == "deferrable", **kwargs)
    before = len(cluster.requests)

    with pytest.raises(ValueError) as error:
        op.execute(make_context())

    field = "metadata.name" if value == "Bad_Name" else {"api_version": "apiVersion"}.get(param, param)
    assert field in str(error.value) and expected in str(error.value)
    if param in ("kind", "api_version"):
        assert isinstance(error.value, SpecError)
    assert len(cluster.requests) == before  # nothing at all was sent


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
@pytest.mark.parametrize("value", ["timestamp", "Reattach", None, ["fail"]])
def test_an_action_if_job_exists_set_after_parsing_is_refused_before_anything_is_sent(cluster, value, mode):
    """The choice is checked where it is used too: a value set on the operator after the constructor checked
    it (a subclass, a DAG-level override) is refused before any request, never taken as "recreate"."""
    op = operators.PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, QUICK), deferrable=mode == "deferrable"
    )
    op.action_if_job_exists = value
    before = len(cluster.requests)

    with pytest.raises(ValueError) as error:
        op.execute(make_context())

    assert "action_if_job_exists must be one of 'reattach', 'recreate', 'fail'" in str(error.value)
    assert len(cluster.requests) == before  # nothing at all was sent


def test_poll_interval_is_the_deprecated_name_of_check_interval():
    with pytest.warns(DeprecationWarning, match="poll_interval is deprecated.*check_interval"):
        op = operators.PyTorchJobOperator(task_id="train", job={}, poll_interval=2)
    assert op.check_interval == 2.0 and not hasattr(op, "poll_interval")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="check_interval must be a number"):
        operators.PyTorchJobOperator(task_id="train", job={}, poll_interval=0)


def test_poll_interval_is_still_taken_by_partial_and_expand():
    """Mapped tasks of earlier DAG files pass it to ``.partial()``, which checks names against the signature;
    each mapped task is then built with it (the constructor's warning, above)."""
    from airflow.sdk import DAG

    with DAG("mapped_poll_interval", schedule=None):
        mapped = operators.PyTorchJobOperator.partial(task_id="train", poll_interval=0.5).expand(job=[{}, {}])

    assert mapped.partial_kwargs["poll_interval"] == 0.5


def test_templated_namespace_is_checked_after_rendering(cluster):
    op = operators.PyTorchJobOperator(
        task_id="train", job=manifest(PYTORCH, QUICK), namespace="{{ params.ns }}"
    )
    op.render_template_fields({"params": {"ns": "Team_A"}})
    before = len(cluster.requests)

    with pytest.raises(ValueError, match=r"namespace must be a Kubernetes namespace name.*'Team_A'"):
        op.execute(make_context())

    assert len(cluster.requests) == before


SENSOR_EXECUTE_TIME_BAD = [
    ("namespace", "Bad_NS", NAMESPACE_EXPECTED),
    ("namespace", "a/b", NAMESPACE_EXPECTED),
    ("job_name", "", "non-empty string"),
    ("job_name", None, "non-empty string"),
    ("log_replicas", ["Wroker"], "PyTorchJob has no replica type 'Wroker'"),
    ("kind", "TorchJob", "unknown training job kind 'TorchJob'"),
]


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
@pytest.mark.parametrize(
    "param,value,expected", SENSOR_EXECUTE_TIME_BAD, ids=map(_id, SENSOR_EXECUTE_TIME_BAD)
)
def test_sensor_refuses_a_bad_value_in_execute_before_any_request(cluster, param, value, expected, mode):
    kwargs = {"kind": "PyTorchJob", "job_name": "job", param: value}
    sensor = sensors.TrainingJobSensor(task_id="wait", deferrable=mode == "deferrable", **kwargs)
    before = len(cluster.requests)

    with pytest.raises(ValueError) as error:
        sensor.execute(make_context())

    assert param in str(error.value) and expected in str(error.value)
    assert len(cluster.requests) == before


@pytest.mark.parametrize("param,value", [("namespace", "Bad_NS"), ("job_name", ""), ("kind", "TorchJob")])
def test_suspend_operator_refuses_a_bad_value_before_any_request(cluster, param, value):
    kwargs = {"kind": "PyTorchJob", "job_name": "job", param: value}
    op = operators.TrainingJobSuspendOperator(task_id="pause", **kwargs)
    before = len(cluster.requests)

    with pytest.raises(ValueError, match=param):
        op.execute(make_context())

    assert len(cluster.requests) == before


def test_the_target_state_choices_are_job_states():
    """params spells the target states out (DAG parsing does not import the kinds); they are JobState's."""
    from airflow_provider_training.kinds.base import JobState
    from airflow_provider_training.params import TARGET_STATES

    assert (JobState.SUCCEEDED.value, JobState.RUNNING.value) == TARGET_STATES

"""TrainingJobOperator behaviour against localkube: validation before any write, retries and reattach, kill,
cleanup, naming and identity, links, startup timeout."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_training import naming
from airflow_provider_training.kinds import get_kind
from airflow_provider_training.links import format_link
from airflow_provider_training.operators import PyTorchJobOperator, TrainingJobOperator
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.submission import STATE_KEY, JobExistsFailure
from tests.operators.harness import (
    KIND_BY_NAME,
    NAMESPACE,
    StateStore,
    first_event,
    in_thread,
    job_or_none,
    jobs,
    make_context,
    manifest,
    pods_running,
    run_operator,
    sent_since,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
PYTORCH = KIND_BY_NAME["PyTorchJob"]
QUICK = {"default": {"duration": 0.05}}
FOREVER = {"default": {"duration": None}}


def pytorch(script=QUICK, **kwargs):
    kwargs.setdefault("check_interval", 0.2)
    return PyTorchJobOperator(task_id="train", job=manifest(PYTORCH, script), **kwargs)


def owned(cluster, context):
    identity = naming.TaskIdentity.from_context(context)
    return [j for j in jobs(cluster, PYTORCH) if identity.owns(j)]


# -- validation -------------------------------------------------------------------------------------------


def _valid():
    return manifest(PYTORCH, QUICK)


def _replicas(job):
    return job["spec"]["pytorchReplicaSpecs"]


def _wrong_type(job):
    _replicas(job)["Chief"] = _replicas(job).pop("Worker")


def _missing_container(job):
    _replicas(job)["Master"]["template"]["spec"]["containers"][0]["name"] = "main"


def _bad_restart_policy(job):
    _replicas(job)["Worker"]["restartPolicy"] = "Sometimes"


def _two_masters(job):
    _replicas(job)["Master"]["replicas"] = 2


def _mutated(change):
    job = copy.deepcopy(_valid())
    change(job)
    return {"job": job}


BAD_SPECS = {
    "wrong replica type": (lambda: _mutated(_wrong_type), "Chief"),
    "missing container": (lambda: _mutated(_missing_container), "pytorch"),
    "bad restart policy": (lambda: _mutated(_bad_restart_policy), "restartPolicy"),
    "PyTorch Master with 2 replicas": (lambda: _mutated(_two_masters), "Master"),
    "name not DNS-1035": (lambda: {"job": _valid(), "job_name": "Bad_Name"}, "metadata.name"),
    "broken YAML": (
        lambda: {"job": "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec: [unclosed"},
        "YAML",
    ),
    "unknown kind": (lambda: {"job": {**_valid(), "kind": "TorchJob"}}, "TorchJob"),
}


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
@pytest.mark.parametrize("name", list(BAD_SPECS))
def test_bad_spec_fails_before_any_api_call(cluster, name, mode):
    make_kwargs, field_named = BAD_SPECS[name]
    op = TrainingJobOperator(task_id="train", deferrable=mode == "deferrable", **make_kwargs())
    requests, writes = len(cluster.requests), len(cluster.write_requests())

    with pytest.raises(ValueError) as error:
        op.execute(make_context())

    assert field_named in str(error.value)
    assert len(cluster.write_requests()) == writes
    assert len(cluster.requests) == requests  # nothing at all was sent


# -- retries and reattach --------------------------------------------------------------------------------


class WorkerDiesBeforeDefer(PyTorchJobOperator):
    """The first try: the job is created, then the worker is lost before the task defers."""

    def defer(self, **kwargs):
        raise RuntimeError("worker lost")


@pytest.mark.parametrize("store", ["state store", "store cleared"])
def test_worker_dying_between_create_and_defer_leaves_one_job(cluster, store):
    first = make_context()
    with pytest.raises(RuntimeError, match="worker lost"):
        WorkerDiesBeforeDefer(task_id="train", job=manifest(PYTORCH, FOREVER), deferrable=True).execute(first)
    created = owned(cluster, first)
    assert len(created) == 1
    if store == "store cleared":  # the identity labels still find it
        first["task_state_store"].delete(STATE_KEY)

    retry = make_context(run_id=first["run_id"], store=first["task_state_store"], try_number=2)
    with pytest.raises(TaskDeferred) as deferred:
        pytorch(FOREVER, deferrable=True).execute(retry)

    after = owned(cluster, retry)
    assert [j["metadata"]["uid"] for j in after] == [created[0]["metadata"]["uid"]]
    assert deferred.value.trigger.job_wait.job.uid == created[0]["metadata"]["uid"]
    asyncio.run(deferred.value.trigger.on_kill())


def test_reattach_to_a_succeeded_job_returns_its_result_without_deferring(cluster):
    context = make_context()
    first = run_operator(pytorch(), context, "sync")
    retry = make_context(run_id=context["run_id"], store=context["task_state_store"], try_number=2)

    result = pytorch(deferrable=True).execute(retry)  # no TaskDeferred: the job is already done

    assert result["state"] == "Succeeded" and result["uid"] == first["uid"]
    assert len(owned(cluster, retry)) == 1


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
def test_reattach_to_a_finished_job_concludes_it_in_one_step_with_no_watch(cluster, mode):
    """A retry that finds its job finished reads it once (the stored identity), lists its pods by label for
    the result, and returns: one hook, two requests, no watch, in both modes."""
    context = make_context()
    first = run_operator(pytorch(), context, "sync")
    retry = make_context(run_id=context["run_id"], store=context["task_state_store"], try_number=2)
    before = len(cluster.requests)

    result = pytorch(deferrable=mode == "deferrable").execute(retry)

    assert result["state"] == "Succeeded" and result["uid"] == first["uid"] and len(result["pods"]) == 2
    name, jobs = first["name"], f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
    assert sent_since(cluster, before) == [
        f"GET {jobs}/{name}",
        f"GET /api/v1/namespaces/{NAMESPACE}/pods?labelSelector={get_kind('PyTorchJob').pod_selector(name)}",
    ]


@pytest.mark.parametrize("failure", ["timeout", "trigger failed"])
def test_a_deferral_airflow_failed_deletes_the_job_only_when_it_timed_out(cluster, failure):
    """The scheduler fails a deferral itself (``__fail__``) when no triggerer ran it past its timeout, or
    when the trigger raised; a timeout deletes the job as the trigger's own timeout would."""
    from airflow.sdk.bases.operator import TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

    context = make_context()
    op = pytorch(FOREVER, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    uid = owned(cluster, context)[0]["metadata"]["uid"]
    error = TriggerFailureReason.TRIGGER_TIMEOUT if failure == "timeout" else "Trigger failure"

    resumed = pytorch(FOREVER, deferrable=True)  # a fresh worker process resumes the task
    with pytest.raises(TaskDeferralTimeout if failure == "timeout" else TaskDeferralError):
        resumed.resume_execution("__fail__", {"error": error}, context)

    left = [j["metadata"]["uid"] for j in owned(cluster, context) if "deletionTimestamp" not in j["metadata"]]
    assert left == ([] if failure == "timeout" else [uid])
    asyncio.run(deferred.value.trigger.on_kill())


def test_reattach_replaces_a_failed_job(cluster):
    context = make_context()
    with pytest.raises(TrainingJobError):
        run_operator(pytorch({"default": {"duration": 0.05, "exit_code": 1}}), context, "sync")
    failed_uid = owned(cluster, context)[0]["metadata"]["uid"]
    retry = make_context(run_id=context["run_id"], store=context["task_state_store"], try_number=2)

    result = run_operator(pytorch(), retry, "sync")

    assert result["state"] == "Succeeded" and result["uid"] != failed_uid
    assert [j["metadata"]["uid"] for j in owned(cluster, retry)] == [result["uid"]]


def test_recreate_and_fail_actions(cluster):
    context = make_context()
    first = run_operator(pytorch(), context, "sync")
    retry = make_context(run_id=context["run_id"], store=context["task_state_store"], try_number=2)

    with pytest.raises(JobExistsFailure, match="action_if_job_exists='fail'"):
        pytorch(action_if_job_exists="fail").execute(retry)
    result = run_operator(pytorch(action_if_job_exists="recreate"), retry, "sync")

    assert result["uid"] != first["uid"]
    assert [j["metadata"]["uid"] for j in owned(cluster, retry)] == [result["uid"]]


def test_a_job_of_another_task_with_the_same_name_is_not_taken_over(cluster):
    run_operator(pytorch(job_name="shared-name"), make_context(), "sync")

    with pytest.raises(JobExistsFailure, match="not created by this task"):
        pytorch(job_name="shared-name").execute(make_context())


# -- kill and cleanup ------------------------------------------------------------------------------------


def test_on_kill_in_sync_mode_deletes_the_job(cluster):
    op = pytorch(FOREVER)
    context = make_context()
    worker, outcome = in_thread(lambda: run_operator(op, context, "sync"))
    name = wait_for(lambda: op._job_ref and pods_running(cluster, op._job_ref.name) and op._job_ref.name)

    op.on_kill()
    worker.join()

    assert job_or_none(cluster, PYTORCH, name) is None
    assert isinstance(outcome.get("error"), TrainingJobError) and outcome["error"].status == "deleted"


def test_on_kill_refused_says_so_in_the_task_log_and_the_job_is_left_running(cluster, capsys):
    """A refused delete (here a 403, as without the Role's `delete`) is an error in the task log naming the
    refusal, not a traceback of the kill thread on stderr."""
    op = pytorch(FOREVER)
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    name = wait_for(lambda: op._job_ref and pods_running(cluster, op._job_ref.name) and op._job_ref.name)
    cluster.faults.fail(403, count=None, method="DELETE", resource="pytorchjobs")
    try:
        op.on_kill()
    finally:
        cluster.faults.clear()

    (refused,) = [line for line in capsys.readouterr().out.splitlines() if "it is left running" in line]
    assert (
        "error" in refused.lower() and "Kubernetes refused `delete` on `pytorchjobs.kubeflow.org`" in refused
    )
    assert job_or_none(cluster, PYTORCH, name) is not None
    op.on_kill()  # allowed again: the wait ends
    worker.join()
    assert outcome["error"].status == "deleted"


def test_on_kill_in_deferrable_mode_is_the_triggers(cluster):
    context = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        pytorch(FOREVER, deferrable=True).execute(context)
    name = deferred.value.trigger.job_wait.job.name
    assert job_or_none(cluster, PYTORCH, name) is not None

    asyncio.run(deferred.value.trigger.on_kill())

    wait_for(lambda: job_or_none(cluster, PYTORCH, name) is None)


def test_on_kill_action_keep_also_applies_while_deferred(cluster):
    with pytest.raises(TaskDeferred) as deferred:
        pytorch(FOREVER, deferrable=True, on_kill_action="keep").execute(make_context())
    trigger, job = deferred.value.trigger, deferred.value.trigger.job_wait.job
    restarted = type(trigger)(**trigger.serialize()[1])
    assert restarted.job_wait.finish.on_kill_action == "keep"  # survives a triggerer restart

    asyncio.run(trigger.on_kill())

    assert job_or_none(cluster, PYTORCH, job.name)["metadata"]["uid"] == job.uid
    assert asyncio.run(_delete(job.name))


def test_on_kill_action_keep(cluster):
    op = pytorch(FOREVER, on_kill_action="keep")
    context = make_context()
    worker, _ = in_thread(lambda: run_operator(op, context, "sync"))
    wait_for(lambda: op._job_ref and pods_running(cluster, op._job_ref.name))

    op.on_kill()

    assert job_or_none(cluster, PYTORCH, op._job_ref.name) is not None
    asyncio.run(_delete(op._job_ref.name))  # end the wait
    worker.join()


@pytest.mark.parametrize(
    ("action", "script", "kept"),
    [
        ("delete", QUICK, False),
        ("delete_succeeded", QUICK, False),
        ("delete_succeeded", {"default": {"duration": 0.05, "exit_code": 2}}, True),
        ("keep", QUICK, True),
    ],
)
def test_on_finish_action(cluster, action, script, kept):
    op = pytorch(script, on_finish_action=action)
    if script is QUICK:
        assert run_operator(op, make_context(), "deferrable")["state"] == "Succeeded"
    else:
        with pytest.raises(TrainingJobError):
            run_operator(op, make_context(), "deferrable")
    assert (job_or_none(cluster, PYTORCH, op._job_ref.name) is not None) == kept


def test_startup_timeout_when_pods_never_schedule(cluster):
    stuck = {"default": {"pending": "Unschedulable"}}
    op = pytorch(stuck, startup_timeout=1.0)

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), "deferrable")

    assert failure.value.status == "timeout"
    assert "no replica pod started within 1s" in str(failure.value)
    assert "Unschedulable" in str(failure.value)
    wait_for(lambda: job_or_none(cluster, PYTORCH, op._job_ref.name) is None)


# -- what is returned, named and linked ------------------------------------------------------------------


def test_wait_until_running_and_none(cluster):
    running = run_operator(pytorch(FOREVER, wait_until="Running"), make_context(), "deferrable")
    submitted = pytorch(FOREVER, wait_until=None).execute(make_context())

    assert running["state"] == "Running"
    assert submitted["state"] in ("Pending", "Running") and submitted["uid"]
    for result in (running, submitted):
        assert asyncio.run(_delete(result["name"]))


async def _delete(name):
    from airflow_provider_training.triggers.training import TrainingJobTrigger

    trigger = TrainingJobTrigger(
        kind="PyTorchJob", api_version="kubeflow.org/v1", job_name=name, namespace=NAMESPACE
    )
    await trigger.on_kill()
    return True


def test_default_name_identity_labels_and_link(cluster, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW__TRAINING__JOB_URL_TEMPLATE", "https://ui.example/{namespace}/{plural}/{name}"
    )
    context = make_context(run_id="scheduled__2026-11-29T12:00:00+00:00:with/odd chars")
    op = pytorch(labels={"team": "vision"}, annotations={"owner": "ml"})

    result = run_operator(op, context, "sync")

    job = job_or_none(cluster, PYTORCH, result["name"])
    labels, annotations = job["metadata"]["labels"], job["metadata"]["annotations"]
    name = result["name"]
    assert name == naming.default_job_name(naming.TaskIdentity.from_context(context), PYTORCH.replicas)
    assert name.startswith("training-dag-train-") and len(name) <= naming.max_name_length(
        ["Worker", "Master"]
    )
    assert labels[naming.DAG_ID] == "training_dag" and labels[naming.TASK_ID] == "train"
    assert labels[naming.RUN_ID] != context["run_id"] and labels["team"] == "vision"
    assert annotations[naming.RUN_ID_FULL] == context["run_id"] and annotations["owner"] == "ml"
    assert annotations[naming.TRY_NUMBER] == "1"
    link = format_link(context["ti"].xcoms["training_job"])
    assert link == f"https://ui.example/{NAMESPACE}/pytorchjobs/{name}"


def test_no_link_without_a_template(cluster):
    context = make_context()
    run_operator(pytorch(), context, "sync")
    assert format_link(context["ti"].xcoms["training_job"]) == ""


def test_deferral_pads_the_framework_timeout_past_the_trigger_deadline(cluster):
    op = pytorch(FOREVER, deferrable=True, execution_timeout=timedelta(minutes=10))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(make_context())
    trigger = deferred.value.trigger
    asyncio.run(trigger.on_kill())

    assert trigger.job_wait.wait.deadline is not None
    assert deferred.value.timeout >= timedelta(minutes=10)
    event = first_event(trigger)
    assert event["status"] == "deleted"


def test_state_store_records_the_job(cluster):
    context = make_context(store=StateStore())
    result = run_operator(pytorch(), context, "sync")
    stored = context["task_state_store"].get(STATE_KEY)
    identity = {k: result[k] for k in ("name", "namespace", "uid", "kind", "api_version")}
    # the connection and the try too, for the Training tab of the UI (docs/ui-tab.md)
    assert stored == {**identity, "kubernetes_conn_id": "kubernetes_default", "try_number": 1}


@pytest.mark.parametrize("source", ["dict", "YAML text", "YAML file", "pydantic model"])
def test_job_sources(cluster, tmp_path, source):
    import yaml

    from airflow_provider_training.specs import parse_job

    job = manifest(PYTORCH, QUICK)
    if source == "YAML text":
        job = yaml.safe_dump(job)
    elif source == "YAML file":
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        job = str(path)
    elif source == "pydantic model":
        job = parse_job(job)

    result = run_operator(
        TrainingJobOperator(task_id="train", job=job, check_interval=0.2), make_context(), "sync"
    )

    assert result["state"] == "Succeeded" and result["kind"] == "PyTorchJob"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"wait_until": "Failed"},
        {"action_if_job_exists": "timestamp"},
        {"on_finish_action": "delete_pod"},
        {"on_kill_action": "keep_pod"},
        {"log_replicas": "workers"},
    ],
)
def test_parameters_are_checked_when_the_dag_is_parsed(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        PyTorchJobOperator(task_id="train", job={}, **kwargs)


def test_a_deferral_stores_the_not_yet_log_position_the_triggers_first_read_finds(cluster):
    """Issue 27: the trigger's first read of its log position was a 404, which the triggerer's execution-API
    client logs as ``ERROR XCom not found`` on every trigger start. The deferral stores a position that says
    "none yet" (a try defers once), which the trigger reads without a warning or an error
    (tests/triggers/test_log_position.py)."""
    from airflow_provider_training.triggers.log_position import NOT_YET, XCOM_KEY

    context = make_context()
    with pytest.raises(TaskDeferred) as deferred:
        pytorch(FOREVER, deferrable=True).execute(context)

    assert context["ti"].xcoms[XCOM_KEY] == NOT_YET
    asyncio.run(deferred.value.trigger.on_kill())

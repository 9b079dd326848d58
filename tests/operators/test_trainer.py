"""TrainJobOperator and TrainJobSensor against the Trainer controller's status shapes, written by hand:
localkube over HTTP with the upstream Trainer v2.3.0 CRDs loaded (tests/fixtures/crds) and no controller.

The acceptance table (success, failure, deleted while waiting, reattach, on_kill, suspend and resume, the
sensor) runs on localkube's Trainer, JobSet and batch Job controllers with the other families'
(``TRAINJOB_CASE`` in tests/operators/families.py), and upstream's runtimes and examples in
test_trainer_examples.py. What stays here is what those controllers do not produce or what is the operator's
own: recorded status shapes with ``trainerStatus``, the runtime check before submit, bad specs, a TrainJob
no controller answers (kubeflow/trainer#2351), and progress lines in the task log. Each test writes the
TrainJob's status and its pods (labelled as JobSet's batch Jobs label them) after the task submitted or
deferred: no step bets on timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from localkube.resources import PODS

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.kinds import get_kind
from airflow_provider_training.operators import (
    TrainJobOperator,
)
from airflow_provider_training.operators.trainer import TrainingRuntimeNotFound
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.sensors import TrainJobSensor
from airflow_provider_training.specs import SpecError
from tests.fixtures import CRDS
from tests.operators.harness import (
    NAMESPACE,
    first_event,
    in_thread,
    make_context,
    run_driven,
    sent_since,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)
TRAIN_JOB = get_kind("TrainJob", "trainer.kubeflow.org/v1alpha1")
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
RUNTIME = "torch-distributed"


def runtime(kind: str, name: str) -> dict[str, Any]:
    """A torch runtime shaped like upstream's manifests/base/runtimes/torch_distributed.yaml."""
    container = {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}
    job = {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [container]}}}}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [job]}}},
    }


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube with the trainer CRDs, no controller and no pod runtime: only the tests write statuses."""
    cluster = LocalKube(runtime="none", controllers=[], crd_dir=CRDS / "trainer.kubeflow.org-v1alpha1")
    with cluster, pytest.MonkeyPatch.context() as mp:
        path = cluster.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        mp.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(path))
        cluster.store.create(
            rtype(cluster, "clustertrainingruntimes"), "", runtime("ClusterTrainingRuntime", RUNTIME)
        )
        yield cluster


def rtype(kube: LocalKube, plural: str) -> Any:
    return kube.store.resource_type(GROUP, VERSION, plural)


def train_jobs(kube: LocalKube) -> list[dict[str, Any]]:
    return kube.store.list(rtype(kube, "trainjobs"), NAMESPACE)


def operator(**options: Any) -> TrainJobOperator:
    options.setdefault("get_logs", False)
    options.setdefault("runtime", RUNTIME)
    options.setdefault("trainer", {"image": "busybox", "command": ["train"], "numNodes": 2})
    return TrainJobOperator(task_id="train", check_interval=0.1, **options)


def condition(type_: str, reason: str, message: str) -> dict[str, Any]:
    at = "2026-11-30T08:05:00Z"
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}


def add_pod(kube: LocalKube, job: str, index: int, phase: str, exit_code: int | None) -> None:
    """node ``index`` of the TrainJob's JobSet, as its batch Job creates it, in ``phase``."""
    name = f"{job}-node-0-{index}-abcde"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": job,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-name": f"{job}-node-0",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    spec = {"containers": [{"name": "node", "image": "busybox"}], "restartPolicy": "Never"}
    kube.store.create(PODS, NAMESPACE, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    kube.logs.start_container(NAMESPACE, name, "node")
    kube.logs.write(NAMESPACE, name, "node", f"node {index}: epoch 1\n")
    if exit_code:
        kube.logs.write(NAMESPACE, name, "node", "RuntimeError: boom\n")
    if exit_code is not None:
        kube.logs.close_container(NAMESPACE, name, "node")
    state = (
        {"running": {"startedAt": "2026-11-30T08:01:00Z"}}
        if exit_code is None
        else {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}
    )
    status = {"phase": phase, "containerStatuses": [{"name": "node", "state": state, "restartCount": 0}]}
    kube.store.update_status(PODS, NAMESPACE, name, status)


def set_status(kube: LocalKube, job: str, status: dict[str, Any]) -> None:
    kube.store.update_status(rtype(kube, "trainjobs"), NAMESPACE, job, status)


def finish(kube: LocalKube, job: str, condition_: dict[str, Any], **node_jobs: int) -> None:
    """The status the Trainer controller copies from a finished JobSet: its condition, the node Job counts."""
    counts = {"ready": 0, "active": 0, "succeeded": 0, "failed": 0, "suspended": 0, **node_jobs}
    extra = {"trainerStatus": TRAINER_STATUS} if node_jobs.get("succeeded") else {}
    set_status(kube, job, {"conditions": [condition_], "jobsStatus": [{"name": "node", **counts}], **extra})


TRAINER_STATUS = {"progressPercentage": 100, "metrics": [{"name": "loss", "value": "0.12"}]}


def succeed(kube: LocalKube, job: str) -> None:
    for index in (0, 1):
        add_pod(kube, job, index, "Succeeded", 0)
    finish(kube, job, condition("Complete", "AllJobsCompleted", "jobset completed successfully"), succeeded=1)


def fail(kube: LocalKube, job: str) -> None:
    add_pod(kube, job, 0, "Failed", 3)
    add_pod(kube, job, 1, "Running", None)
    finish(
        kube, job, condition("Failed", "FailedJobs", "jobset failed due to reaching max restarts"), failed=1
    )


MODES = ["sync", "deferrable"]


@pytest.mark.parametrize("mode", MODES)
def test_success_returns_the_result_with_the_trainer_progress(kube, mode):
    result = run_driven(operator(), mode, lambda job: succeed(kube, job))

    assert (result["kind"], result["state"], result["reason"]) == (
        "TrainJob",
        "Succeeded",
        "AllJobsCompleted",
    )
    assert result["progress"] == TRAINER_STATUS
    assert result["replicas"] == {"node": {"desired": None, "active": 0, "succeeded": 1, "failed": 0}}
    assert sorted(result["pods"]) == [f"{result['name']}-node-0-{i}-abcde" for i in (0, 1)]
    sent = kube.store.get(rtype(kube, "trainjobs"), NAMESPACE, result["name"])["spec"]
    assert sent["runtimeRef"] == {"name": RUNTIME, "apiGroup": GROUP, "kind": "ClusterTrainingRuntime"}
    assert sent["trainer"] == {"image": "busybox", "command": ["train"], "numNodes": 2}


@pytest.mark.parametrize("mode", MODES)
def test_failure_names_the_reason_and_the_failing_node_with_its_exit_code(kube, mode):
    with pytest.raises(TrainingJobError) as failure:
        run_driven(operator(get_logs=True), mode, lambda job: fail(kube, job))

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "reason FailedJobs" in message and "jobset failed due to reaching max restarts" in message
    assert "node-0 (pod " in message and "container node): exit code 3" in message
    assert "| RuntimeError: boom" in message  # node-0's last log lines
    assert "node-1" not in message  # still running: not a failing replica


def test_a_missing_cluster_runtime_fails_before_anything_is_submitted(kube):
    before = len(kube.requests)

    with pytest.raises(TrainingRuntimeNotFound) as failure:
        operator(runtime="no-such-runtime").execute(make_context())

    assert str(failure.value).startswith(
        "the TrainJob's runtime ClusterTrainingRuntime 'no-such-runtime' does not exist in the cluster: "
        "nothing was submitted"
    )
    assert [line for line in sent_since(kube, before) if not line.startswith("GET ")] == []


def test_a_namespaced_runtime_is_looked_up_in_the_jobs_namespace(kube):
    with pytest.raises(
        TrainingRuntimeNotFound, match="TrainingRuntime 'team-torch' does not exist in namespace"
    ):
        operator(runtime="team-torch", runtime_kind="TrainingRuntime").execute(make_context())

    kube.store.create(rtype(kube, "trainingruntimes"), NAMESPACE, runtime("TrainingRuntime", "team-torch"))
    result = run_driven(
        operator(runtime="team-torch", runtime_kind="TrainingRuntime"), "sync", lambda job: succeed(kube, job)
    )
    assert result["state"] == "Succeeded"


def test_a_bad_spec_is_refused_naming_the_field_before_any_request(kube):
    before = len(kube.requests)

    with pytest.raises(SpecError, match=r"spec\.trainer\.numNodes"):
        operator(trainer={"numNodes": 0}).execute(make_context())

    assert sent_since(kube, before) == []


def test_another_releases_field_is_refused_by_the_installed_crd_and_nothing_is_created(kube):
    """Trainer v2.0's ``podSpecOverrides`` on a cluster whose CRD is v2.3's (which has ``runtimePatches``):
    the API server would have dropped the overrides without a word; the strict create refuses them."""
    overrides = [{"targetJobs": [{"name": "node"}], "tolerations": [{"key": "gpu", "operator": "Exists"}]}]
    stored = len(train_jobs(kube))

    with pytest.raises(KubeApiError) as refused:
        operator(spec={"podSpecOverrides": overrides}).execute(make_context())

    assert refused.value.unknown_fields == ["spec.podSpecOverrides"]
    assert "another release of the operator" in str(refused.value)
    assert len(train_jobs(kube)) == stored


def test_a_whole_manifest_works_too_and_the_arguments_exclude_each_other(kube):
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": "from-manifest"},
        "spec": {"runtimeRef": {"name": RUNTIME}, "trainer": {"numNodes": 1}},
    }
    result = run_driven(
        TrainJobOperator(task_id="train", job=job, check_interval=0.1, get_logs=False),
        "sync",
        lambda name: succeed(kube, name),
    )
    assert result["name"] == "from-manifest"

    with pytest.raises(ValueError, match="either job or runtime"):
        TrainJobOperator(task_id="t", job=job, runtime=RUNTIME)
    with pytest.raises(ValueError, match="runtime is required"):
        TrainJobOperator(task_id="t")
    with pytest.raises(ValueError, match="runtime_kind must be one of"):
        TrainJobOperator(task_id="t", runtime=RUNTIME, runtime_kind="Runtime")


@pytest.mark.parametrize("mode", MODES)
def test_sensor_returns_the_finished_jobs_result(kube, mode):
    job = operator(wait_until=None).execute(make_context())["name"]
    succeed(kube, job)
    sensor = TrainJobSensor(task_id="wait", job_name=job, poke_interval=0.1, timeout=30)
    sensor.deferrable = mode == "deferrable"

    result = sensor.execute(make_context())

    assert (result["state"], result["progress"]) == ("Succeeded", TRAINER_STATUS)


@pytest.mark.parametrize("mode", MODES)
def test_no_status_past_the_grace_period_names_the_jobset_creation(kube, monkeypatch, mode):
    """kubeflow/trainer#2351: a TrainJob whose JobSet could not be created gets no condition at all."""
    monkeypatch.setenv("AIRFLOW__TRAINING__STATUS_GRACE_PERIOD", "1")

    with pytest.raises(TrainingJobError) as failure:
        run_driven(operator(), mode, lambda job: None)

    assert failure.value.status == "error"
    assert failure.value.event["job_status"]["reason"] == "OperatorNotRunning"
    assert "could not create the TrainJob's JobSet" in str(failure.value)


# -- trainerStatus in the task log: each change of the reported progress is one line, in sync mode and in
# the trigger; each status is written once the log showed the one before.
NODES = [{"name": "node", "ready": 2, "active": 2, "succeeded": 0, "failed": 0, "suspended": 0}]
DONE = [{"name": "node", "ready": 0, "active": 0, "succeeded": 1, "failed": 0, "suspended": 0}]


def trainer_status(percent: int, seconds_left: int, loss: str) -> dict[str, Any]:
    return {
        "progressPercentage": percent,
        "estimatedRemainingSeconds": seconds_left,
        "metrics": [{"name": "loss", "value": loss}],
        "lastUpdatedTime": f"2026-12-03T08:{percent // 10:02d}:00Z",
    }


def train(kube: LocalKube, job: str, logged: Callable[[str], None]) -> None:
    """Progress 40 % then 80 % while running, each written once the log showed the one before; then done."""
    for percent, left, loss in ((40, 120, "0.52"), (80, 40, "0.31")):
        set_status(kube, job, {"jobsStatus": NODES, "trainerStatus": trainer_status(percent, left, loss)})
        logged(f"progress {percent}%, about {left}s left, loss={loss}")
    complete = condition("Complete", "AllJobsCompleted", "jobset completed successfully")
    status = {"conditions": [complete], "jobsStatus": DONE, "trainerStatus": trainer_status(100, 0, "0.12")}
    set_status(kube, job, status)


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
def test_each_progress_change_is_one_line_of_the_task_log(kube, capsys, mode):
    op = operator(deferrable=mode == "deferrable")
    printed: list[str] = []

    def logged(text: str) -> None:
        wait_for(lambda: printed.append(capsys.readouterr().out) or text in "".join(printed), timeout=30)

    if mode == "sync":
        thread, outcome = in_thread(lambda: op.execute(make_context()))
        train(kube, wait_for(lambda: op._job_ref).name, logged)
        thread.join(60)
        result = outcome["result"]
    else:
        context = make_context()
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        thread, outcome = in_thread(lambda: first_event(deferred.value.trigger))
        train(kube, deferred.value.trigger.job_wait.job.name, logged)
        thread.join(60)
        kwargs = {**(deferred.value.kwargs or {}), "event": outcome["result"]}
        result = op.resume_execution(deferred.value.method_name, kwargs, context)

    printed.append(capsys.readouterr().out)
    out = "".join(printed)
    # 40 %: the state's change (Pending to Running), whose header says it; 80 %: a line of its own.
    assert out.count("progress 40%") == 1 and out.count("progress 80%") == 1
    assert "is Running (Running: trainer: progress 40%, about 120s left, loss=0.52)" in out
    assert f"TrainJob default/{op._job_ref.name}: trainer: progress 80%, about 40s left, loss=0.31" in out
    assert result["state"] == "Succeeded"
    assert result["progress"]["progressPercentage"] == 100
    assert "loss=0.12" in result["message"]

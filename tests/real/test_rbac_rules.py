"""Every rule of docs/rbac.md's Role that the Kubeflow v1 kinds and the common path use, removed one verb at a
time on the real API server: the operation that needs it either fails the task with an error naming the verb,
the resource (with its API group) and the namespace, and pointing to docs/rbac.md, or, where the read is best
effort (pod logs, a pod's re-read, events), the run concludes and the task log carries a warning naming them.

Each test binds a ServiceAccount in a namespace of its own to the documented Role less one verb (tests/real/
rbac.py) and runs real operators (a PyTorchJob) as that account."""

from __future__ import annotations

import asyncio
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from localkube.realcluster import RealCluster

from airflow_provider_training.operators import PyTorchJobOperator, TrainingJobSuspendOperator
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import (
    KIND_BY_NAME,
    StateStore,
    in_thread,
    make_context,
    manifest,
    run_operator,
)
from tests.real.rbac import Grant, bind, documented_rules, without

pytestmark = pytest.mark.timeout(180)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
KUBEFLOW = "kubeflow.org"
JOBS = "pytorchjobs.kubeflow.org"
QUICK = {"default": {"duration": 0.3, "logs": ["{type}-{index} saved model"]}}
FAILING = {
    "default": {"duration": 2},
    "Master": {"duration": 0.2, "exit_code": 3, "logs": ["RuntimeError: shard 7 is corrupt"]},
}
FOREVER = {"default": {"duration": None, "logs": ["{type}-{index} epoch 1"]}}


def operator(grant: Grant, name: str, script: dict = QUICK, **kwargs: Any) -> PyTorchJobOperator:
    job = manifest(PYTORCH, script, name=name, namespace=grant.namespace)
    return PyTorchJobOperator(task_id="train", job=job, check_interval=0.2, log_replicas="all", **kwargs)


def assert_names(text: str, verb: str, resource: str, namespace: str) -> None:
    """``text`` carries the provider's 403 wording for ``verb`` on ``resource`` in ``namespace``."""
    assert f"Kubernetes refused `{verb}` on `{resource}`" in text, text
    assert (
        f"in namespace {namespace} (403 Forbidden): the connection's identity lacks this permission" in text
    )
    assert "docs/rbac.md lists the Role" in text
    # and the API server's own words, naming the ServiceAccount
    assert f'cannot {verb} resource "{resource.split(".")[0]}"' in text, text


def job_exists(cluster: RealCluster, namespace: str, name: str) -> bool:
    return cluster.get_or_none(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}") is not None


# -- removing the rule fails the task, naming it -------------------------------------------------------------


def submit_and_wait(mode: str) -> Callable[[RealCluster, Grant, str], BaseException]:
    """Submit a job and wait for it in ``mode``; the task must fail."""

    def run(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
        with pytest.raises(Exception) as failure:
            run_operator(operator(grant, name), make_context(), mode)
        return failure.value

    return run


def reattach(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
    """Try 1 submits (and returns at once); try 2 reads the job try 1 stored (a GET) to reattach."""
    store, run_id = StateStore(), "manual__rbac-reattach"
    operator(grant, name, wait_until=None).execute(make_context(run_id=run_id, store=store))
    with pytest.raises(Exception) as failure:
        operator(grant, name).execute(make_context(run_id=run_id, store=store, try_number=2))
    return failure.value


def delete_when_finished(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
    """``on_finish_action="delete"``: the job succeeds, then its deletion is refused."""
    with pytest.raises(Exception) as failure:
        run_operator(operator(grant, name, on_finish_action="delete"), make_context(), "sync")
    return failure.value


def recreate(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
    """``action_if_job_exists="recreate"``: try 2 deletes try 1's job to submit it again."""
    store, run_id = StateStore(), "manual__rbac-recreate"
    operator(grant, name, wait_until=None).execute(make_context(run_id=run_id, store=store))
    with pytest.raises(Exception) as failure:
        op = operator(grant, name, action_if_job_exists="recreate")
        op.execute(make_context(run_id=run_id, store=store, try_number=2))
    return failure.value


def kill_deferred(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
    """The deferred task is killed: the trigger's ``on_kill`` deletes the job."""
    with pytest.raises(TaskDeferred) as deferred:
        operator(grant, name, FOREVER, deferrable=True).execute(make_context())
    with pytest.raises(Exception) as failure:
        asyncio.run(deferred.value.trigger.on_kill())
    return failure.value


def suspend(cluster: RealCluster, grant: Grant, name: str) -> BaseException:
    """The suspend operator merge-patches the job (try 1 submitted it)."""
    operator(grant, name, FOREVER, wait_until=None).execute(make_context())
    op = TrainingJobSuspendOperator(task_id="suspend", job_name=name, kind="PyTorchJob")
    with pytest.raises(Exception) as failure:
        op.execute(make_context())
    return failure.value


@dataclass(frozen=True)
class Refused:
    """One verb on one resource removed from the documented Role, and the operation that needs it."""

    id: str
    resource: str
    verb: str
    group: str
    run: Callable[[RealCluster, Grant, str], BaseException]
    error: type[BaseException] = Exception  # what the task raises
    job_left: bool | None = None  # whether the job must still exist afterwards (None: not checked)

    def __str__(self) -> str:
        return self.id


FAILS = [
    Refused("pods-list-sync-wait", "pods", "list", "", submit_and_wait("sync"), TrainingJobError, True),
    Refused("pods-watch-deferred-wait", "pods", "watch", "", submit_and_wait("deferrable"), TrainingJobError),
    Refused("job-create-submit", "pytorchjobs", "create", KUBEFLOW, submit_and_wait("sync"), job_left=False),
    Refused("job-get-reattach", "pytorchjobs", "get", KUBEFLOW, reattach, job_left=True),
    Refused("job-list-submit", "pytorchjobs", "list", KUBEFLOW, submit_and_wait("sync"), job_left=False),
    Refused(
        "job-watch-sync-wait", "pytorchjobs", "watch", KUBEFLOW, submit_and_wait("sync"), TrainingJobError
    ),
    Refused(
        "job-watch-deferred-wait",
        "pytorchjobs",
        "watch",
        KUBEFLOW,
        submit_and_wait("deferrable"),
        TrainingJobError,
    ),
    Refused("job-delete-on-finish", "pytorchjobs", "delete", KUBEFLOW, delete_when_finished, job_left=True),
    Refused("job-delete-recreate", "pytorchjobs", "delete", KUBEFLOW, recreate, job_left=True),
    Refused("job-delete-on-kill-deferred", "pytorchjobs", "delete", KUBEFLOW, kill_deferred, job_left=True),
    Refused("job-patch-suspend", "pytorchjobs", "patch", KUBEFLOW, suspend, job_left=True),
]


@contextmanager
def as_role_without(
    cluster: RealCluster,
    monkeypatch: pytest.MonkeyPatch,
    case_id: str,
    resource: str,
    verb: str,
    group: str = "",
) -> Iterator[Grant]:
    """The default connection as the documented Role less ``verb`` on ``resource``, in namespace
    ``rbac-<case_id>``, deleted (with what the test left there) afterwards."""
    grant = bind(cluster, without(documented_rules(), resource, verb, group), f"rbac-{case_id}")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", grant.connection_json)
    try:
        yield grant
    finally:
        cluster.request("DELETE", f"/api/v1/namespaces/{grant.namespace}")


@pytest.mark.parametrize("case", FAILS, ids=str)
def test_without_the_rule_the_task_fails_naming_it(real_cluster, monkeypatch, case):
    with as_role_without(real_cluster, monkeypatch, case.id, case.resource, case.verb, case.group) as grant:
        name = f"r-{case.id}"[:40]
        error = case.run(real_cluster, grant, name)
        job_left = job_exists(real_cluster, grant.namespace, name)

    assert isinstance(error, case.error), repr(error)
    resource = f"{case.resource}.{case.group}" if case.group else case.resource
    assert_names(str(error), case.verb, resource, grant.namespace)
    if case.job_left is not None:
        assert job_left is case.job_left


# -- best effort: the run concludes, the task log says what was refused --------------------------------------


def test_without_pod_logs_the_job_succeeds_and_the_log_says_why_it_has_no_lines(
    real_cluster, monkeypatch, capsys
):
    with as_role_without(real_cluster, monkeypatch, "podlog-get", "pods/log", "get") as grant:
        result = run_operator(operator(grant, "r-podlog-get"), make_context(), "sync")
    out = capsys.readouterr().out  # the task log

    assert result["state"] == "Succeeded"
    assert "saved model" not in out and "the rest of master-0's log could not be read: " in out
    assert_names(out, "get", "pods/log", grant.namespace)


def test_without_events_a_failure_is_still_explained_and_the_log_says_events_were_refused(
    real_cluster, monkeypatch, capsys
):
    refused = as_role_without(real_cluster, monkeypatch, "events-list", "events", "list")
    with refused as grant, pytest.raises(TrainingJobError) as failure:
        run_operator(operator(grant, "r-events-list", FAILING), make_context(), "deferrable")
    out = capsys.readouterr().out  # the task log

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 3" in message and "RuntimeError: shard 7 is corrupt" in message
    assert_names(message, "list", "events", grant.namespace)
    assert_names(out, "list", "events", grant.namespace)


HOLD = "test.localkube.dev/hold"  # a finalizer no controller removes: the test does


def set_finalizers(cluster: RealCluster, path: str, finalizers: list[str] | None) -> None:
    """Merge-patch the finalizers of the object at ``path`` (a pod gone already is left alone)."""
    try:
        body = {"metadata": {"finalizers": finalizers}}
        cluster.request("PATCH", path, body, content_type="application/merge-patch+json")
    except urllib.error.HTTPError as err:
        if err.code != 404:
            raise


def test_without_pod_get_the_end_of_a_followed_log_is_warned_and_the_wait_goes_on(
    real_cluster, monkeypatch, capsys
):
    """The log streamer re-reads a pod (a GET) when the log it follows ends and the pod watch brings neither
    the container's end nor the pod's deletion (it waits ``retry_interval`` for them). Here the pod is
    deleted under the follow: its container stops, so its log ends, but a finalizer holds the deleted pod
    (the gate: no DELETED event, which would make the read needless) until the warning is in the task log.
    Then the pod goes, the operator creates it again (restartPolicy OnFailure) and the job runs on,
    followed."""
    printed: list[str] = []

    def count(text: str) -> int:
        printed.append(capsys.readouterr().out)
        return "".join(printed).count(text)

    line, stopped = "[master-0] master-0 epoch 1", "Stopped streaming the logs of pod r-pods-get-master-0"
    with as_role_without(real_cluster, monkeypatch, "pods-get", "pods", "get") as grant:
        pod = f"/api/v1/namespaces/{grant.namespace}/pods/r-pods-get-master-0"
        job = manifest(
            PYTORCH, FOREVER, name="r-pods-get", namespace=grant.namespace, restart_policy="OnFailure"
        )
        op = PyTorchJobOperator(task_id="train", job=job, check_interval=0.2, log_replicas="all")
        worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
        try:
            real_cluster.wait_for(lambda: count(line), 90)  # followed
            set_finalizers(real_cluster, pod, [HOLD])
            real_cluster.request("DELETE", pod)
            real_cluster.wait_for(lambda: count(stopped), 90)
            set_finalizers(real_cluster, pod, None)  # the gate opens: the pod goes and comes again
            real_cluster.wait_for(lambda: count(line) >= 2, 90)  # the new master-0 is followed
        finally:
            set_finalizers(real_cluster, pod, None)
            op.on_kill()
            worker.join(timeout=90)

    assert isinstance(outcome.get("error"), TrainingJobError), outcome
    assert outcome["error"].status == "deleted"  # the wait went on until the task was killed
    assert_names("".join(printed), "get", "pods", grant.namespace)

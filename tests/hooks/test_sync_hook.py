"""TrainingJobHook: the sync facade runs the async core on a private loop thread, against localkube."""

from __future__ import annotations

import inspect
import threading

import pytest
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from localkube.pytest_plugin import connection_json

from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
from airflow_provider_training.jobs import JobExistsError, create_job, delete_job, wait_job_deleted
from airflow_provider_training.kinds.base import PODS
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY, job_body, pod_manifest, requests_to, rtype

PYTORCH = get_kind("PyTorchJob")

# The async hook's public coroutine methods that have no sync twin, and why.
ASYNC_ONLY = {
    "close": "the facade's own close() also stops its private loop",
    "transport": "the transport's sessions live on the private loop; code outside it cannot use them",
    "get_settings": "the facade resolves the connection itself; async_hook.get_settings() is there",
    "watch_objects": "watches are read on an event loop (watch.WatchHub); sync code waits with run_inline",
    "open_log": "the stream's connection lives on the private loop; sync code reads follow_log's lines",
}


@pytest.fixture
def sync_hook(thread_kube, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(thread_kube.kubeconfig, "sync-ns"))
    hook = TrainingJobHook(retry=FAST_RETRY)
    yield hook
    hook.close()


def test_is_a_kubernetes_connection_hook():
    assert issubclass(TrainingJobHook, BaseHook)
    assert TrainingJobHook.conn_type == "kubernetes"
    assert TrainingJobHook.conn_name_attr == "kubernetes_conn_id"
    assert TrainingJobHook.default_conn_name == "kubernetes_default"
    assert TrainingJobHook.hook_name


def test_same_calls_without_await(thread_kube, sync_hook):
    assert sync_hook.get_namespace() == "sync-ns"
    created = sync_hook.run(
        create_job(sync_hook.async_hook, PYTORCH, job_body("sync", {"k": "v"}), "default")
    )
    assert sync_hook.get_job(PYTORCH, "sync", "default")["metadata"]["uid"] == created["metadata"]["uid"]
    assert [j["metadata"]["name"] for j in sync_hook.find_jobs(PYTORCH, "default", "k=v")] == ["sync"]
    with pytest.raises(JobExistsError):
        sync_hook.run(create_job(sync_hook.async_hook, PYTORCH, job_body("sync", {"k": "other"}), "default"))
    assert sync_hook.patch_job(PYTORCH, "sync", "default", {"metadata": {"labels": {"x": "y"}}})["metadata"][
        "labels"
    ] == {"k": "v", "x": "y"}
    assert sync_hook.run(delete_job(sync_hook.async_hook, PYTORCH, "sync", "default")) is True
    assert sync_hook.run(
        wait_job_deleted(sync_hook.async_hook, PYTORCH, "sync", "default", timeout=5, interval=0.01)
    )


def test_one_private_loop_and_client_per_hook(thread_kube, sync_hook):
    sync_hook.get_job(PYTORCH, "a", "default")
    core = sync_hook.async_hook
    loop_thread = sync_hook._loop
    sync_hook.list_pods("default", "a=b")
    assert sync_hook.async_hook is core and sync_hook._loop is loop_thread
    assert core.request_count == 2
    names = {t.name for t in threading.enumerate()}
    assert "training-hook-kubernetes_default" in names
    sync_hook.close()
    assert "training-hook-kubernetes_default" not in {t.name for t in threading.enumerate()}


def test_run_runs_async_work_on_the_hooks_own_loop_and_client(thread_kube, sync_hook):
    created = sync_hook.run(create_job(sync_hook.async_hook, PYTORCH, job_body("ran", {"k": "v"}), "default"))

    async def read_back() -> tuple[str, str]:
        job = await sync_hook.async_hook.get_job(PYTORCH, "ran", "default")
        return job["metadata"]["uid"], threading.current_thread().name

    assert sync_hook.run(read_back()) == (created["metadata"]["uid"], "training-hook-kubernetes_default")

    async def fails() -> None:
        await sync_hook.async_hook.get_namespace()
        raise ValueError("raised on the loop")

    with pytest.raises(ValueError, match="raised on the loop"):
        sync_hook.run(fails())


def test_retries_work_through_the_facade(thread_kube, sync_hook):
    thread_kube.faults.fail(503, 1, method="GET", resource="pytorchjobs")
    assert sync_hook.get_job(PYTORCH, "absent", "default") is None
    assert [r.status for r in requests_to(thread_kube, "pytorchjobs")] == [503, 404]


def test_logs_read_and_followed(thread_kube, sync_hook):
    pod = pod_manifest(PYTORCH, "synclogs", "Master", 0)
    name = pod["metadata"]["name"]
    thread_kube.call(thread_kube.store.create, rtype(thread_kube, PODS), "default", pod)
    thread_kube.logs.start_container("default", name, "pytorch")
    thread_kube.logs.write("default", name, "pytorch", "ünïcode line\nnext\n")
    assert sync_hook.read_log("default", name, "pytorch") == "ünïcode line\nnext\n"

    seen = []
    for line in sync_hook.follow_log("default", name, "pytorch", timestamps=False):
        seen.append(line)
        if line == "next":
            thread_kube.logs.write("default", name, "pytorch", "end")
            thread_kube.logs.close_container("default", name, "pytorch")
    assert seen == ["ünïcode line", "next", "end"]


def test_connection_resolved_in_the_callers_thread(thread_kube, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", connection_json(thread_kube.kubeconfig, "other-ns"))
    hook = TrainingJobHook("other")
    try:
        assert isinstance(hook.get_conn(), AsyncTrainingJobHook)
        assert hook.async_hook._extras is not None and hook.async_hook._extras["namespace"] == "other-ns"
        assert hook.get_namespace() == "other-ns"
    finally:
        hook.close()


def test_missing_named_connection_fails_clearly():
    with pytest.raises(AirflowNotFoundException):
        TrainingJobHook("nope").get_namespace()


def test_children_and_replica_pods_without_await(thread_kube, sync_hook):
    from tests.hooks.family_objects import create_edl_children

    edl = get_kind("TrainingJob", "paddlepaddle.org/v1")
    created = create_edl_children(thread_kube, "example")
    children = sync_hook.list_children(edl, "example", "default")
    assert {key: len(items) for key, items in children.items()} == {
        "jobs.batch": 1,
        "replicasets.apps": 2,
        "pods": 5,
    }
    pods = sync_hook.list_job_pods(edl, "example", "default")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(created["pods"])
    # No TrainingJob; its children go.
    assert sync_hook.run(delete_job(sync_hook.async_hook, edl, "example", "default")) is False
    assert sync_hook.list_job_pods(edl, "example", "default") == []


def test_every_public_async_method_has_a_sync_twin_made_from_it():
    """No hand-kept sync copy: each twin is ``_sync(AsyncTrainingJobHook.<name>)`` (or ``_sync_iter``)."""
    methods = {
        name: method
        for name, method in inspect.getmembers(AsyncTrainingJobHook)
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method))
    }
    assert ASYNC_ONLY.keys() <= methods.keys()
    for name, method in methods.items():
        if name in ASYNC_ONLY:
            continue
        twin = getattr(TrainingJobHook, name, None)
        assert twin is not None, f"TrainingJobHook has no {name}(); add {name} = _sync(...) or say why not"
        assert inspect.unwrap(twin) is method, f"TrainingJobHook.{name} is not made from the async method"
        assert not (inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin))


def test_both_hooks_take_the_same_parameters_and_pass_every_one_on():
    assert inspect.signature(TrainingJobHook) == inspect.signature(AsyncTrainingJobHook)
    given = {
        "config_file": "/etc/kubeconfig",
        "cluster_context": "training",
        "namespace": "ml",
        "connection_extras": {"namespace": "from-extras"},  # resolved already: no connection lookup
        "retry": FAST_RETRY,
        "request_timeout": 5.0,
    }
    sync = TrainingJobHook("no_such_connection", **given)
    try:
        expected = {"kubernetes_conn_id": "no_such_connection", **given}
        assert sync.parameters() == sync.async_hook.parameters() == expected
        assert sync.async_hook.copy().parameters() == expected
        assert sync.get_namespace() == "ml"
    finally:
        sync.close()
    assert "from-extras" not in repr(sync)  # extras may hold credentials

"""AsyncTrainingJobHook against localkube over HTTP, on a ``kubernetes`` connection from the environment."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from localkube.kubeconfig import kubeconfig_dict

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import RetryPolicy
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.jobs import JobExistsError, create_job, delete_job, wait_job_deleted
from airflow_provider_training.kinds.base import BATCH_JOBS, CONFIGMAPS, PODS, ChildResource
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY, job_body, pod_manifest, requests_to, rtype

PYTORCH = get_kind("PyTorchJob")


async def test_create_get_patch_find_delete(kube, hook):
    created = await create_job(hook, PYTORCH, job_body("train", {"team": "a"}), "default")
    assert created["metadata"]["uid"]
    assert created["apiVersion"] == "kubeflow.org/v1" and created["kind"] == "PyTorchJob"

    got = await hook.get_job(PYTORCH, "train", "default")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert await hook.get_job(PYTORCH, "absent", "default") is None

    patched = await hook.patch_job(PYTORCH, "train", "default", {"metadata": {"labels": {"stage": "2"}}})
    assert patched["metadata"]["labels"] == {"team": "a", "stage": "2"}
    patch_calls = requests_to(kube, "pytorchjobs", method="PATCH")
    assert [r.status for r in patch_calls] == [200]  # merge patch accepted by a custom resource (no 415)

    assert [j["metadata"]["name"] for j in await hook.find_jobs(PYTORCH, "default", "team=a")] == ["train"]
    assert await hook.find_jobs(PYTORCH, "default", "team=b") == []

    assert await delete_job(hook, PYTORCH, "train", "default") is True
    assert await delete_job(hook, PYTORCH, "train", "default") is False


async def test_an_error_event_of_a_watch_names_the_watch(kube, hook):
    kube.faults.expire_watch(1, resource="pytorchjobs")
    with pytest.raises(KubeApiError) as expired:
        async for _ in hook.watch_objects(PYTORCH.resource, "default", resource_version="1"):
            pass

    assert expired.value.status == 410
    assert str(expired.value).startswith("watch pytorchjobs.kubeflow.org in namespace default: 410 ")


async def test_namespace_comes_from_the_connection_unless_given(kube_conn):
    assert await AsyncTrainingJobHook(kube_conn).get_namespace() == "team-a"
    assert await AsyncTrainingJobHook(kube_conn, namespace="mine").get_namespace() == "mine"


async def test_inline_kube_config_connection(kube, monkeypatch):
    config = yaml.safe_dump(kubeconfig_dict(kube.url, kube.token))
    conn = {"conn_type": "kubernetes", "extra": {"kube_config": config}}
    monkeypatch.setenv("AIRFLOW_CONN_INLINE", json.dumps(conn))
    inline = AsyncTrainingJobHook("inline")
    try:
        await create_job(inline, PYTORCH, job_body("inline"), "default")
        assert (await inline.get_job(PYTORCH, "inline", "default"))["metadata"]["name"] == "inline"
    finally:
        await inline.close()


async def test_missing_default_connection_uses_kubeconfig_env(kube, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    default = AsyncTrainingJobHook()
    try:
        assert await default.get_job(PYTORCH, "absent", "default") is None
        assert await default.get_namespace() == "default"
    finally:
        await default.close()


async def test_explicit_config_file_wins_over_the_connection(kube, tmp_path, monkeypatch):
    # The connection points at a server that does not exist; the explicit config_file at localkube.
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(kubeconfig_dict("http://127.0.0.1:9", "x")))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DEAD", json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(dead)}})
    )
    explicit = AsyncTrainingJobHook("dead", config_file=str(kube.kubeconfig))
    try:
        assert await explicit.get_job(PYTORCH, "absent", "default") is None
    finally:
        await explicit.close()


async def test_one_api_client_is_reused(hook):
    first = await hook.transport()
    await hook.get_job(PYTORCH, "a", "default")
    await hook.list_pods("default", "a=b")
    assert await hook.transport() is first
    assert hook.request_count == 2


async def test_existing_job_of_someone_else_raises_job_exists(kube, hook):
    await create_job(hook, PYTORCH, job_body("taken", {"owner": "them"}), "default")
    with pytest.raises(JobExistsError) as caught:
        await create_job(hook, PYTORCH, job_body("taken", {"owner": "us"}), "default")
    assert caught.value.existing is not None
    assert caught.value.existing["metadata"]["labels"] == {"owner": "them"}
    # A first-attempt 409 is never taken for our own object, even when the labels match.
    with pytest.raises(JobExistsError):
        await create_job(hook, PYTORCH, job_body("taken", {"owner": "them"}), "default")


async def test_retried_create_whose_first_answer_was_lost_returns_our_object(kube, hook):
    # What a lost answer leaves behind: the object exists, the client saw a dropped connection.
    ours = job_body("lost-answer", {"airflow-run": "r1"})
    typed = {**ours, "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
    stored = kube.store.create(rtype(kube, PYTORCH.resource), "default", typed)
    kube.faults.drop(1, method="POST")
    created = await create_job(hook, PYTORCH, ours, "default")
    assert created["metadata"]["uid"] == stored["metadata"]["uid"]
    assert [r.status for r in requests_to(kube, "pytorchjobs", method="POST")][-1] == 409


async def test_retried_create_that_finds_a_foreign_object_raises(kube, hook):
    foreign = {**job_body("clash", {"airflow-run": "other"}), "apiVersion": "kubeflow.org/v1"}
    foreign["kind"] = "PyTorchJob"
    kube.store.create(rtype(kube, PYTORCH.resource), "default", foreign)
    kube.faults.drop(1, method="POST")
    with pytest.raises(JobExistsError):
        await create_job(hook, PYTORCH, job_body("clash", {"airflow-run": "r1"}), "default")


async def test_429_is_retried_after_retry_after(kube, kube_conn):
    waits: list[float] = []
    policy = RetryPolicy(attempts=3, base_delay=0.01, on_retry=lambda _n, delay, _exc: waits.append(delay))
    throttled = AsyncTrainingJobHook(kube_conn, retry=policy)
    kube.faults.throttle(1, retry_after=1, method="GET", resource="pytorchjobs")
    try:
        assert await throttled.get_job(PYTORCH, "absent", "default") is None
    finally:
        await throttled.close()
    assert waits == [1.0]  # the server's Retry-After, not the 10 ms backoff
    assert [r.status for r in requests_to(kube, "pytorchjobs")] == [429, 404]


async def test_503_is_retried(kube, hook):
    await create_job(hook, PYTORCH, job_body("flaky"), "default")
    kube.faults.fail(503, 2, method="GET", resource="pytorchjobs")
    assert (await hook.get_job(PYTORCH, "flaky", "default"))["metadata"]["name"] == "flaky"
    assert [r.status for r in requests_to(kube, "pytorchjobs")] == [503, 503, 200]


async def test_dropped_connection_is_retried(kube, hook):
    kube.faults.drop(1, method="GET", resource="pods")
    assert await hook.list_pods("default", "a=b") == []
    assert len(requests_to(kube, "pods")) == 2


async def test_retries_are_bounded(kube, hook):
    kube.faults.fail(500, None, method="GET", resource="pytorchjobs")
    with pytest.raises(KubeApiError) as caught:
        await hook.get_job(PYTORCH, "x", "default")
    assert caught.value.status == 500
    assert len(requests_to(kube, "pytorchjobs")) == FAST_RETRY.attempts


async def test_client_errors_are_not_retried(kube, hook):
    with pytest.raises(KubeApiError) as caught:
        await hook.patch_job(PYTORCH, "absent", "default", {"metadata": {"labels": {"a": "b"}}})
    assert caught.value.status == 404 and "not found" in str(caught.value)
    assert len(requests_to(kube, "pytorchjobs", method="PATCH")) == 1


async def test_delete_job_propagates_and_cleans_children(kube, hook):
    import dataclasses

    kind = dataclasses.replace(
        PYTORCH,
        children=(
            ChildResource(CONFIGMAPS, selector=lambda job: f"job={job}", delete_on_cleanup=True),
            ChildResource(BATCH_JOBS, selector=lambda job: f"job={job}", needed_for_status=True),
        ),
    )
    await create_job(hook, kind, job_body("parent"), "default")
    for name, job in (("cm-mine", "parent"), ("cm-other", "other")):
        configmap = {"metadata": {"name": name, "labels": {"job": job}}}
        kube.store.create(rtype(kube, CONFIGMAPS), "default", configmap)
    pod_spec = {"containers": [{"name": "trainer", "image": "busybox"}]}
    batch = {
        "metadata": {"name": "trainer", "labels": {"job": "parent"}},
        "spec": {"template": {"spec": pod_spec}},
    }
    kube.store.create(rtype(kube, BATCH_JOBS), "default", batch)

    children = await hook.list_children(kind, "parent", "default")
    assert list(children) == ["jobs.batch"]
    assert [c["metadata"]["name"] for c in children["jobs.batch"]] == ["trainer"]

    assert await delete_job(hook, kind, "parent", "default") is True
    job_delete = requests_to(kube, "pytorchjobs", method="DELETE")[0]
    assert job_delete.status == 200
    left = [c["metadata"]["name"] for c in kube.store.list(rtype(kube, CONFIGMAPS), "default")]
    assert "cm-mine" not in left and "cm-other" in left
    # children without delete_on_cleanup are the garbage collector's business, not ours
    assert [j["metadata"]["name"] for j in kube.store.list(rtype(kube, BATCH_JOBS), "default")] == ["trainer"]


async def test_foreground_delete_is_waited_for(kube, hook):
    await create_job(hook, PYTORCH, job_body("fg"), "default")
    assert await delete_job(hook, PYTORCH, "fg", "default") is True
    assert await wait_job_deleted(hook, PYTORCH, "fg", "default", timeout=5, interval=0.01) is True


async def test_events_about_an_object(kube, hook):
    from localkube.events import record_event

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": "default", "uid": "u"}}
    other = {**pod, "metadata": {**pod["metadata"], "name": "p1"}}
    record_event(kube.store, pod, "Warning", "FailedScheduling", "0/1 nodes are available", "scheduler")
    record_event(kube.store, other, "Normal", "Pulled", "pulled", "kubelet")
    events = await hook.list_events("default", "p0", "Pod")
    assert [(e["reason"], e["message"]) for e in events] == [("FailedScheduling", "0/1 nodes are available")]


async def test_events_come_oldest_first_by_when_each_last_happened(kube, hook):
    """One ordering for events from both recorders: series.lastObservedTime, lastTimestamp, eventTime,
    firstTimestamp, then the Event's creationTimestamp (the order ``kubectl events`` sorts by)."""
    from airflow_provider_training.diagnostics import event_time
    from airflow_provider_training.kinds.base import EVENTS

    def event(name: str, **times: object) -> dict:
        involved = {"kind": "Pod", "name": "p0", "namespace": "default"}
        return {"metadata": {"name": name}, "involvedObject": involved, "reason": name, **times}

    written = [
        event("unstamped"),  # only the server's creationTimestamp: now, after every time below
        event("legacy-repeated", firstTimestamp="2026-01-01T10:00:00Z", lastTimestamp="2026-01-01T10:00:05Z"),
        event(
            "new-repeated",
            eventTime="2026-01-01T10:00:01.000000Z",
            series={"count": 3, "lastObservedTime": "2026-01-01T10:00:09.000000Z"},
        ),
        event("new-once", eventTime="2026-01-01T10:00:03.500000Z"),
        event("first-only", firstTimestamp="2026-01-01T10:00:04Z"),
    ]
    for obj in written:
        kube.store.create(rtype(kube, EVENTS), "default", obj)

    events = await hook.list_events("default", "p0", "Pod")

    assert [e["reason"] for e in events] == [
        "new-once",
        "first-only",
        "legacy-repeated",
        "new-repeated",
        "unstamped",
    ]
    assert [event_time(e) for e in events][:4] == [
        "2026-01-01T10:00:03.500000Z",
        "2026-01-01T10:00:04Z",
        "2026-01-01T10:00:05Z",
        "2026-01-01T10:00:09.000000Z",
    ]
    assert event_time(events[-1]) == events[-1]["metadata"]["creationTimestamp"]
    assert event_time({}) == ""


def _running_pod(kube, name="logpod"):
    pod = pod_manifest(PYTORCH, "logjob", "Master", 0)
    pod["metadata"]["name"] = name
    kube.store.create(rtype(kube, PODS), "default", pod)
    kube.logs.start_container("default", name, "pytorch")
    return name


async def test_pod_logs_are_decoded_by_us(kube, hook):
    name = _running_pod(kube)
    kube.logs.write("default", name, "pytorch", "héllo wörld ✓\nsecond line\n")
    text = await hook.read_log("default", name, "pytorch")
    assert text == "héllo wörld ✓\nsecond line\n"  # not "b'h\\xc3\\xa9llo..." (kubernetes 36.x bug)
    assert await hook.read_log("default", name, "pytorch", tail_lines=1) == "second line\n"
    stamped = await hook.read_log("default", name, "pytorch", timestamps=True)
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped.splitlines())
    future = datetime.now(UTC) + timedelta(hours=1)
    assert await hook.read_log("default", name, "pytorch", since_time=future) == ""


async def test_previous_instance_log(kube, hook):
    name = _running_pod(kube)
    kube.logs.write("default", name, "pytorch", "first run\n")
    kube.logs.start_container("default", name, "pytorch")
    kube.logs.write("default", name, "pytorch", "second run\n")
    assert await hook.read_log("default", name, "pytorch", previous=True) == "first run\n"
    assert await hook.read_log("default", name, "pytorch") == "second run\n"


async def test_log_of_container_not_started_is_a_400(kube, hook):
    pod = pod_manifest(PYTORCH, "waitjob", "Master", 0)
    kube.store.create(rtype(kube, PODS), "default", pod)
    with pytest.raises(KubeApiError) as caught:
        await hook.read_log("default", pod["metadata"]["name"], "pytorch")
    assert caught.value.status == 400 and "waiting to start" in caught.value.message


async def test_follow_log_streams_lines_until_the_container_ends(kube, hook):
    import asyncio

    name = _running_pod(kube)
    kube.logs.write("default", name, "pytorch", "one\n")
    lines: list[str] = []

    async def follow():
        async for line in hook.follow_log("default", name, "pytorch", timestamps=False):
            lines.append(line)
            if line == "one":
                kube.logs.write("default", name, "pytorch", "two ✓\nthree\n")
            if line == "three":
                kube.logs.close_container("default", name, "pytorch")

    await asyncio.wait_for(follow(), 10)
    assert lines == ["one", "two ✓", "three"]
    assert requests_to(kube, "pods")[-1].query.get("follow") == "true"


EXEC_PLUGIN = """
import json, pathlib, sys
calls = pathlib.Path(sys.argv[1])
count = int(calls.read_text()) if calls.exists() else 0
calls.write_text(str(count + 1))
token = "expired" if count == 0 else sys.argv[2]
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": token}}))
"""


async def test_expired_exec_credentials_are_loaded_again_on_401(kube, tmp_path, monkeypatch):
    """A kubeconfig whose exec plugin (as EKS/GKE use) first hands out a token that has expired."""
    import sys

    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    calls = tmp_path / "calls"
    config = kubeconfig_dict(kube.url, "unused")
    exec_spec = {"apiVersion": "client.authentication.k8s.io/v1beta1", "interactiveMode": "Never"}
    exec_spec.update(command=sys.executable, args=[str(plugin), str(calls), kube.token])
    config["users"][0]["user"] = {"exec": exec_spec}
    conn = {"conn_type": "kubernetes", "extra": {"kube_config": config}}
    monkeypatch.setenv("AIRFLOW_CONN_EXEC", json.dumps(conn))
    exec_hook = AsyncTrainingJobHook("exec", retry=FAST_RETRY)
    try:
        assert await exec_hook.get_job(PYTORCH, "absent", "default") is None
    finally:
        await exec_hook.close()
    assert [r.status for r in requests_to(kube, "pytorchjobs")] == [401, 404]
    assert calls.read_text() == "2"

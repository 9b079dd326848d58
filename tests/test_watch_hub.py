"""WatchHub against localkube over HTTP: one shared LIST+WATCH, resume, relist on 410, backoff, fan-out."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from localkube.cluster import LocalKube

from airflow_provider_training import watch as watch_module
from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import BATCH_JOBS, PODS, REPLICASETS, ResourceRef
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.slim import trim
from airflow_provider_training.subscribers import Subscriber
from airflow_provider_training.watch import WatchEvent, WatchHub
from tests.hooks.kube_env import (
    FAST_RETRY,
    cluster_and_hook,
    job_body,
    local_cluster,
    requests_to,
    rtype,
    until,
    use_connection,
)

PYTORCH = get_kind("PyTorchJob")
JOB = PYTORCH.resource


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[LocalKube]:
    async with local_cluster(tmp_path) as cluster:
        yield cluster


@pytest_asyncio.fixture
async def hook(kube: LocalKube, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AsyncTrainingJobHook]:
    h = AsyncTrainingJobHook(use_connection(monkeypatch, kube), retry=FAST_RETRY)
    yield h
    await h.close()


def create(
    cluster: LocalKube, name: str, labels: dict[str, str] | None = None, namespace: str = "default"
) -> dict:
    body = {**job_body(name, labels), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
    return cluster.store.create(rtype(cluster, JOB), namespace, body)


def relabel(cluster: LocalKube, name: str, labels: dict[str, str]) -> dict:
    patch = {"metadata": {"labels": labels}}
    return cluster.store.patch(rtype(cluster, JOB), "default", name, patch, "application/merge-patch+json")


async def next_event(events: AsyncIterator[WatchEvent]) -> WatchEvent:
    return await asyncio.wait_for(anext(events), 10)  # a guard against hanging, not a timing assertion


async def watch_open(cluster: LocalKube, count: int = 1) -> None:
    """Wait until the server has answered ``count`` watch requests (it registers a watch before answering)."""
    await until(lambda: len([r for r in watches(cluster) if r.status == 200]) >= count)


def watches(cluster: LocalKube, plural: str = "pytorchjobs") -> list:
    return requests_to(cluster, plural, watch=True)


def lists(cluster: LocalKube, plural: str = "pytorchjobs") -> list:
    return [r for r in requests_to(cluster, plural, watch=False) if r.path.endswith(f"/{plural}")]


async def test_two_subscribers_on_two_jobs_share_one_watch(kube, hook):
    hub = WatchHub()
    create(kube, "job-a")
    async with (
        hub.subscribe(hook, JOB, "default", name="job-a") as a,
        hub.subscribe(hook, JOB, "default", name="job-b") as b,
    ):
        first_a, first_b = await next_event(a), await next_event(b)
        assert (first_a.type, first_a.name) == ("ADDED", "job-a")
        assert (first_b.type, first_b.name) == ("DELETED", "job-b")  # absent: a DELETED marker

        create(kube, "job-b")
        relabel(kube, "job-a", {"step": "1"})
        added_b, modified_a = await next_event(b), await next_event(a)
        assert (added_b.type, added_b.name) == ("ADDED", "job-b")
        assert modified_a.type == "MODIFIED" and modified_a.object["metadata"]["labels"] == {"step": "1"}

        assert len(watches(kube)) == 1 and len(lists(kube)) == 1
        stats = hub.stats
        assert (stats.watches_opened, stats.lists, stats.active_watches, stats.subscribers) == (1, 1, 1, 2)
    assert hub.stats.active_watches == 0 and hub.stats.subscribers == 0
    assert hub.stats.requests == 2  # one LIST, one WATCH


async def test_many_subscribers_one_watch(kube, hook):
    hub = WatchHub()
    names = [f"job-{i}" for i in range(20)]
    async with contextlib.AsyncExitStack() as stack:
        subs = [await stack.enter_async_context(hub.subscribe(hook, JOB, "default", name=n)) for n in names]
        assert [(await next_event(s)).type for s in subs] == ["DELETED"] * 20
        for n in names:
            create(kube, n)
        assert [(await next_event(s)).name for s in subs] == names
    assert len(watches(kube)) == 1 and len(lists(kube)) == 1


async def test_subscriber_joining_later_gets_the_cached_state(kube, hook):
    hub = WatchHub()
    create(kube, "early")
    async with hub.subscribe(hook, JOB, "default", name="early") as first:
        await next_event(first)
        relabel(kube, "early", {"v": "2"})
        assert (await next_event(first)).type == "MODIFIED"
        async with hub.subscribe(hook, JOB, "default", name="early") as late:
            current = await next_event(late)
            assert current.type == "ADDED" and current.object["metadata"]["labels"] == {"v": "2"}
    assert len(lists(kube)) == 1


async def test_resumes_from_the_last_resource_version_when_the_server_ends_the_stream(kube, hook):
    hub = WatchHub()
    create(kube, "job")
    async with hub.subscribe(hook, JOB, "default", name="job") as events:
        await next_event(events)
        last = relabel(kube, "job", {"v": "1"})
        assert (await next_event(events)).type == "MODIFIED"
        await watch_open(kube)
        assert kube.faults.end_watches() == 1
        relabel(kube, "job", {"v": "2"})  # while the hub reconnects
        event = await next_event(events)
        assert event.type == "MODIFIED" and event.object["metadata"]["labels"] == {"v": "2"}
        await until(lambda: len(watches(kube)) == 2)
    second = watches(kube)[1]
    assert int(second.query["resourceVersion"]) >= int(last["metadata"]["resourceVersion"])
    assert second.query.get("allowWatchBookmarks") == "true"
    assert len(lists(kube)) == 1  # resumed, not relisted
    assert hub.stats.relists == 0


async def test_relists_after_410_and_reports_missed_changes(kube, hook):
    hub = WatchHub()
    create(kube, "changed")
    create(kube, "removed")
    create(kube, "kept")
    async with (
        hub.subscribe(hook, JOB, "default", name="changed") as changed,
        hub.subscribe(hook, JOB, "default", name="removed") as removed,
        hub.subscribe(hook, JOB, "default", name="kept") as kept,
    ):
        for sub in (changed, removed, kept):
            assert (await next_event(sub)).type == "ADDED"
        await watch_open(kube)
        kube.faults.expire_watch(1)
        # End the stream and change the objects before the hub can reconnect (the same loop runs both):
        assert kube.faults.end_watches() == 1
        relabel(kube, "changed", {"v": "new"})
        kube.store.delete(rtype(kube, JOB), "default", "removed")
        assert (await next_event(changed)).object["metadata"]["labels"] == {"v": "new"}
        gone = await next_event(removed)
        assert (gone.type, gone.name) == ("DELETED", "removed")
        create(kube, "late")  # the watch after the relist still works
        async with hub.subscribe(hook, JOB, "default", name="late") as late:
            assert (await next_event(late)).type == "ADDED"
        relabel(kube, "kept", {"v": "touched"})  # no synthetic event was queued for the unchanged object
        assert (await next_event(kept)).object["metadata"]["labels"] == {"v": "touched"}
    assert hub.stats.relists == 1 and hub.stats.lists == 2
    assert [r.status for r in lists(kube)] == [200, 200]


async def test_object_confirmed_by_get_and_then_deleted_during_an_expired_watch(kube, hook):
    hub = WatchHub()
    async with hub.subscribe(hook, JOB, "default", name="other") as first:
        await next_event(first)  # the watch has listed
        create(kube, "fresh")  # not in the hub's cache yet: the subscriber's first event comes from a GET
        async with hub.subscribe(hook, JOB, "default", name="fresh") as events:
            assert (await next_event(events)).type == "ADDED"
            await watch_open(kube)
            kube.faults.expire_watch(1)
            assert kube.faults.end_watches() == 1
            kube.store.delete(rtype(kube, JOB), "default", "fresh")
            gone = await next_event(events)
            assert (gone.type, gone.name) == ("DELETED", "fresh")
    assert hub.stats.relists == 1
    gets = [r for r in requests_to(kube, "pytorchjobs") if r.path.endswith("/fresh")]
    assert [r.status for r in gets] == [200]


async def test_relist_after_a_real_410_from_expired_history(tmp_path, monkeypatch):
    async with cluster_and_hook(tmp_path, monkeypatch, history_size=3) as (cluster, hook):
        hub = WatchHub()
        create(cluster, "busy")
        async with hub.subscribe(hook, JOB, "default", name="busy") as events:
            await next_event(events)
            await watch_open(cluster)
            cluster.faults.end_watches()
            for i in range(10):  # more changes than the server's history keeps
                relabel(cluster, "busy", {"v": str(i)})
            event = await next_event(events)
            assert event.type == "MODIFIED" and event.object["metadata"]["labels"] == {"v": "9"}
        assert hub.stats.relists == 1


async def test_deleted_object_is_reported(kube, hook):
    hub = WatchHub()
    create(kube, "doomed")
    async with hub.subscribe(hook, JOB, "default", name="doomed") as events:
        assert (await next_event(events)).type == "ADDED"
        kube.store.delete(rtype(kube, JOB), "default", "doomed")
        event = await next_event(events)
        assert (event.type, event.name) == ("DELETED", "doomed")


async def test_the_watch_stops_when_the_last_subscriber_leaves(kube, hook):
    hub = WatchHub()
    async with hub.subscribe(hook, JOB, "default", name="x") as events:
        await next_event(events)
        async with hub.subscribe(hook, JOB, "default", name="y") as other:
            await next_event(other)
        assert hub.stats.active_watches == 1
        await until(lambda: len(watches(kube)) == 1)
    assert hub.stats.active_watches == 0
    await until(lambda: kube.faults.end_watches() == 0)  # the server has no open watch left
    async with hub.subscribe(hook, JOB, "default", name="x") as events:  # a new subscriber starts over
        await next_event(events)
    assert hub.stats.lists == 2


async def test_label_selector_subscription(kube, hook):
    hub = WatchHub()
    create(kube, "blue-1", {"color": "blue"})
    create(kube, "red-1", {"color": "red"})
    async with hub.subscribe(hook, JOB, "default", label_selector="color=blue") as blue:
        first = await next_event(blue)
        assert (first.type, first.name) == ("ADDED", "blue-1")
        create(kube, "blue-2", {"color": "blue"})
        assert (await next_event(blue)).name == "blue-2"
        relabel(kube, "red-1", {"color": "blue"})  # starts matching
        assert [(e.type, e.name) for e in [await next_event(blue)]] == [("ADDED", "red-1")]
        relabel(kube, "blue-1", {"color": "green"})  # stops matching
        assert [(e.type, e.name) for e in [await next_event(blue)]] == [("DELETED", "blue-1")]
        relabel(kube, "blue-2", {"color": "blue", "size": "l"})
        assert [(e.type, e.name) for e in [await next_event(blue)]] == [("MODIFIED", "blue-2")]


async def test_label_selectors_select_their_union_each_object_once(kube, hook):
    hub = WatchHub()
    create(kube, "blue", {"color": "blue"})
    create(kube, "red", {"color": "red", "size": "l"})
    create(kube, "green", {"color": "green"})
    selectors = ["color=blue", "color=red", "size=l"]  # "red" matches two of them
    async with hub.subscribe(hook, JOB, "default", label_selector=selectors) as some:
        first = sorted([(e.type, e.name) for e in [await next_event(some), await next_event(some)]])
        assert first == [("ADDED", "blue"), ("ADDED", "red")]
        relabel(kube, "red", {"color": None})  # still matches size=l
        assert [(e.type, e.name) for e in [await next_event(some)]] == [("MODIFIED", "red")]
        relabel(kube, "red", {"size": None})  # matches none now
        assert [(e.type, e.name) for e in [await next_event(some)]] == [("DELETED", "red")]
        relabel(kube, "green", {"color": "blue"})
        assert [(e.type, e.name) for e in [await next_event(some)]] == [("ADDED", "green")]


@pytest.mark.parametrize("resource", [BATCH_JOBS, REPLICASETS], ids=lambda r: r.key)
async def test_named_subscription_on_a_child_resource(kube, hook, resource):
    """Children found by name (unlabelled batch Jobs, ReplicaSets): absent first, then each change."""
    hub = WatchHub()
    rt = rtype(kube, resource)
    containers = [{"name": "main", "image": "example/main:1"}]
    body = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "spec": {"template": {"spec": {"containers": containers}}},
    }
    kube.store.create(rt, "default", {**body, "metadata": {"name": "job-b-master"}})
    async with (
        hub.subscribe(hook, resource, "default", name="job-a-master") as child,
        hub.subscribe(hook, resource, "default", name="job-b-master") as neighbour,
    ):
        absent = await next_event(child)
        assert (absent.type, absent.name) == ("DELETED", "job-a-master")
        assert (await next_event(neighbour)).type == "ADDED"
        kube.store.create(rt, "default", {**body, "metadata": {"name": "job-a-master"}})
        kube.store.update_status(rt, "default", "job-a-master", {"replicas": 1})
        kube.store.delete(rt, "default", "job-a-master")
        seen = [await next_event(child) for _ in range(3)]
        assert [(e.type, e.name) for e in seen] == [
            ("ADDED", "job-a-master"),
            ("MODIFIED", "job-a-master"),
            ("DELETED", "job-a-master"),
        ]
        assert seen[1].object["status"] == {"replicas": 1}
        assert hub.stats.active_watches == 1  # one watch for both names
    assert len(watches(kube, resource.plural)) == 1


async def test_reconnects_with_backoff_after_dropped_connections_and_server_errors(kube, hook):
    hub = WatchHub()
    create(kube, "job")
    kube.faults.fail(503, 1, resource="pytorchjobs", method="GET")  # the first LIST
    async with hub.subscribe(hook, JOB, "default", name="job") as events:
        assert (await next_event(events)).type == "ADDED"
        await watch_open(kube)
        kube.faults.drop(2, path="pytorchjobs", method="GET")  # the next two reconnects
        kube.faults.end_watches()
        relabel(kube, "job", {"v": "after"})
        event = await next_event(events)
        assert event.object["metadata"]["labels"] == {"v": "after"}
    statuses = [r.status for r in requests_to(kube, "pytorchjobs")]
    assert statuses == [503, 200, 200, None, None, 200]  # LIST retried; watch re-opened after two drops
    assert hub.stats.relists == 0 and hub.stats.lists == 1


async def test_a_permanent_error_is_raised_to_subscribers(kube, hook):
    hub = WatchHub()
    unknown = ResourceRef("example.com", "v1", "widgets", "Widget")
    with pytest.raises(KubeApiError) as caught:
        async with hub.subscribe(hook, unknown, "default", name="w") as events:
            await next_event(events)
    assert caught.value.status == 404
    assert len(requests_to(kube, "widgets")) == 1  # not retried


async def test_bookmarks_advance_the_resume_version(tmp_path, monkeypatch):
    async with cluster_and_hook(tmp_path, monkeypatch, bookmark_interval=0.02) as (cluster, hook):
        hub = WatchHub()
        create(cluster, "quiet")
        async with hub.subscribe(hook, JOB, "default", name="quiet") as events:
            await next_event(events)
            listed_rv = int(cluster.store.resource_version)
            pods = rtype(cluster, PODS)
            for i in range(3):  # changes elsewhere move the server's resourceVersion on
                spec = {"containers": [{"name": "main", "image": "example/main:1"}]}
                cluster.store.create(pods, "default", {"metadata": {"name": f"p{i}"}, "spec": spec})
            await until(lambda: hub.stats.events >= 1)  # a BOOKMARK arrived
            cluster.faults.end_watches()
            await until(lambda: len(watches(cluster)) == 2)
        assert int(watches(cluster)[1].query["resourceVersion"]) > listed_rv


async def test_namespaces_and_resources_get_their_own_watch(kube, hook):
    hub = WatchHub()
    async with (
        hub.subscribe(hook, JOB, "default", name="a") as one,
        hub.subscribe(hook, JOB, "other", name="a") as two,
        hub.subscribe(hook, PODS, "default", name="a") as three,
    ):
        for sub in (one, two, three):
            await next_event(sub)
        assert hub.stats.active_watches == 3


async def test_shared_hub_is_one_per_event_loop():
    hub = WatchHub.shared()
    assert WatchHub.shared() is hub
    other: list[WatchHub] = []

    async def elsewhere() -> None:
        other.append(WatchHub.shared())

    thread = threading.Thread(target=lambda: asyncio.run(elsewhere()))
    thread.start()
    thread.join()
    assert other and other[0] is not hub


async def test_cancelling_the_last_subscriber_keeps_the_callers_cancellation_message(kube, hook):
    """The triggerer cancels a trigger with a message ("user action") and only then calls its on_kill: closing
    the last subscription of a shared watch must let that cancellation through unchanged."""
    hub = WatchHub()
    create(kube, "job-a")
    subscribed = asyncio.Event()

    async def waiter() -> None:
        async with hub.subscribe(hook, JOB, "default", name="job-a") as events:
            await next_event(events)
            subscribed.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(waiter())
    await asyncio.wait_for(subscribed.wait(), 10)
    task.cancel("__airflow_user_action__")
    with pytest.raises(asyncio.CancelledError) as cancelled:
        await task
    assert cancelled.value.args == ("__airflow_user_action__",)
    assert hub.stats.active_watches == 0


@pytest.fixture
def offers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every (subscriber id, object name) the hub offers a change to, recorded around the real offer."""
    seen: list[tuple[int, str]] = []
    offer = Subscriber.offer

    def recording(self, type_, obj):
        seen.append((id(self), obj["metadata"]["name"]))
        offer(self, type_, obj)

    monkeypatch.setattr(Subscriber, "offer", recording)
    return seen


async def test_an_event_reaches_only_its_own_subscribers_and_all_of_them(kube, hook, offers):
    hub = WatchHub()
    for name in ("job-a", "job-b"):
        create(kube, name, {"job": name})
    wanted = [{"name": "job-a"}, {"name": "job-a"}, {"label_selector": "job=job-a"}]
    others = [{"name": "job-b"}, {"label_selector": "job=job-b"}, {"label_selector": "job in (job-b,x)"}]
    async with contextlib.AsyncExitStack() as stack:
        mine = [await stack.enter_async_context(hub.subscribe(hook, JOB, "default", **w)) for w in wanted]
        rest = [await stack.enter_async_context(hub.subscribe(hook, JOB, "default", **o)) for o in others]
        # A selector with no key=value term (it matches both jobs) is offered every change.
        everything = await stack.enter_async_context(
            hub.subscribe(hook, JOB, "default", label_selector="job")
        )
        for sub in [*mine, *rest]:
            assert (await next_event(sub)).type == "ADDED"
        assert sorted([(await next_event(everything)).name for _ in range(2)]) == ["job-a", "job-b"]
        offers.clear()

        relabel(kube, "job-a", {"step": "1"})
        for sub in mine:
            event = await next_event(sub)
            assert (event.type, event.name) == ("MODIFIED", "job-a")
        assert (await next_event(everything)).name == "job-a"
        # Three subscribers of job-a and the unindexed one; none of job-b's was offered the change.
        assert len(offers) == 4 and {name for _, name in offers} == {"job-a"}

        relabel(kube, "job-a", {"job": "job-b"})  # now selected by job-b's selectors, no longer by job-a's
        assert (await next_event(mine[2])).type == "DELETED"
        assert [(await next_event(sub)).type for sub in rest[1:]] == ["ADDED", "ADDED"]


async def test_a_new_subscription_replays_only_its_own_objects(kube, hook, offers):
    hub = WatchHub()
    for i in range(30):
        create(kube, f"job-{i}", {"job": f"job-{i}"})
    async with hub.subscribe(hook, JOB, "default", label_selector="job=job-0") as first:
        assert (await next_event(first)).name == "job-0"
        offers.clear()
        async with hub.subscribe(hook, JOB, "default", label_selector="job=job-7") as late:
            event = await next_event(late)
            assert (event.type, event.name) == ("ADDED", "job-7")
            assert offers == [(offers[0][0], "job-7")]  # one object offered, not the 30 cached


async def test_a_feed_hands_each_event_and_the_ending_error_to_its_callable(kube, hook):
    hub = WatchHub()
    create(kube, "job-a")
    got: list = []
    async with hub.feed(hook, JOB, "default", got.append, name="job-a"):
        await until(lambda: len(got) == 1)
        relabel(kube, "job-a", {"step": "1"})
        await until(lambda: len(got) == 2)
    assert [(e.type, e.name) for e in got] == [("ADDED", "job-a"), ("MODIFIED", "job-a")]
    unknown = ResourceRef("example.com", "v1", "widgets", "Widget")
    errors: list = []
    async with hub.feed(hook, unknown, "default", errors.append, name="w"):
        await until(lambda: len(errors) == 1)
    assert isinstance(errors[0], KubeApiError) and errors[0].status == 404  # handed over, not raised


async def test_the_cache_drops_managed_fields(kube, hook):
    hub = WatchHub()
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    body = {**job_body("listed"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
    body["metadata"]["managedFields"] = managed
    kube.store.create(rtype(kube, JOB), "default", body)
    async with hub.subscribe(hook, JOB, "default", label_selector="") as events:
        listed = await next_event(events)
        watched_body = {**job_body("watched"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
        watched_body["metadata"]["managedFields"] = managed
        kube.store.create(rtype(kube, JOB), "default", watched_body)
        watched = await next_event(events)
    assert (listed.name, watched.name) == ("listed", "watched")
    assert (
        "managedFields" not in listed.object["metadata"] and "managedFields" not in watched.object["metadata"]
    )
    stored = kube.store.get(rtype(kube, JOB), "default", "listed")
    assert stored["metadata"].get("managedFields") == managed  # the server kept them: the hub dropped them


async def test_the_cache_keeps_of_a_pod_what_its_readers_read(kube, hook):
    """What readers of watched pods use stays (metadata but annotations; the node, restart policy and
    container names; the phase, reason, message, conditions, start time and container states); the rest
    (images, env, mounts, volumes, tolerations, IPs, QoS class, annotations) is not held in memory."""
    hub = WatchHub()
    container = {
        "name": "trainer",
        "image": "registry.example/train:1",
        "env": [{"name": "EPOCHS", "value": "20"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    spec = {
        "containers": [container],
        "initContainers": [{**container, "name": "fetch"}],
        "nodeName": "node-1",
        "restartPolicy": "Never",
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
    metadata = {"name": "p", "labels": {"a": "b"}, "annotations": {"note": "x" * 1000}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    kube.store.create(rtype(kube, PODS), "default", pod)
    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    status = {
        "phase": "Running",
        "reason": "R",
        "message": "M",
        "qosClass": "BestEffort",
        "podIP": "10.0.0.1",
        "podIPs": [{"ip": "10.0.0.1"}],
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ],
        "initContainerStatuses": [
            {"name": "fetch", "image": "i", "imageID": "x", "state": {"terminated": {"exitCode": 0}}}
        ],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": "registry.example/train:1",
                "containerID": "containerd://1",
                "state": running,
                "lastState": {},
                "restartCount": 1,
                "ready": True,
                "started": True,
            }
        ],
    }
    kube.store.update_status(rtype(kube, PODS), "default", "p", status)
    async with hub.subscribe(hook, PODS, "default", label_selector="a=b") as events:
        cached = (await next_event(events)).object
    assert cached["spec"] == {
        "nodeName": "node-1",
        "restartPolicy": "Never",
        "initContainers": [{"name": "fetch"}],
        "containers": [{"name": "trainer"}],
    }
    whole = kube.store.get(rtype(kube, PODS), "default", "p")
    assert cached["metadata"] == {k: v for k, v in whole["metadata"].items() if k != "annotations"}
    assert cached["status"] == {
        "phase": "Running",
        "reason": "R",
        "message": "M",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": status["conditions"],
        "initContainerStatuses": [{"name": "fetch", "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [
            {
                "name": "trainer",
                "state": running,
                "lastState": {},
                "restartCount": 1,
                "ready": True,
                "started": True,
            }
        ],
    }
    assert whole["spec"]["volumes"] and whole["metadata"]["annotations"]  # the server's pod is whole


async def test_the_cache_keeps_of_a_job_all_but_annotations_and_pod_templates(kube, hook):
    """A kind's status may read any field of a job's spec or status, but none reads its annotations
    (``last-applied-configuration`` is the whole manifest) or its replicas' pod templates."""
    hub = WatchHub()
    body = {**job_body("templated"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 500}
    kube.store.create(rtype(kube, JOB), "default", body)
    async with hub.subscribe(hook, JOB, "default", name="templated") as events:
        cached = (await next_event(events)).object
    stored = kube.store.get(rtype(kube, JOB), "default", "templated")
    replicas = stored["spec"]["pytorchReplicaSpecs"]
    assert all("template" in spec for spec in replicas.values())  # the server's job is whole
    assert cached["spec"]["pytorchReplicaSpecs"] == {
        name: {k: v for k, v in spec.items() if k != "template"} for name, spec in replicas.items()
    }
    assert "annotations" not in cached["metadata"] and stored["metadata"]["annotations"]
    assert cached["metadata"] == {k: v for k, v in stored["metadata"].items() if k != "annotations"}
    assert cached.get("status") == stored.get("status")
    # Strings are shared with every other cached object's (interned), keys included.
    name = cached["metadata"]["name"]
    assert sys.intern("templated") is name and all(sys.intern(key) is key for key in cached["metadata"])


async def test_every_reader_sees_the_object_as_trimmed(kube, hook):
    """What a subscriber is handed, at priming and with a watch event, and what ``cached`` returns, is the
    object as trimmed; ``cached`` is a copy of its own."""
    hub = WatchHub()
    create(kube, "trimmed", {"job": "trimmed"})
    stored = kube.store.get(rtype(kube, JOB), "default", "trimmed")
    async with (
        hub.subscribe(hook, JOB, "default", name="trimmed") as named,
        hub.subscribe(hook, JOB, "default", label_selector="job=trimmed") as selected,
    ):
        first = [await next_event(named), await next_event(selected)]
        relabel(kube, "trimmed", {"step": "1"})
        changed = [await next_event(named), await next_event(selected)]
        cached = hub.cached(hook, JOB, "default", "trimmed")
        assert cached == hub.cached(hook, JOB, "default", "trimmed")
        cached["metadata"]["labels"]["step"] = "changed by a reader"
        assert hub.cached(hook, JOB, "default", "trimmed")["metadata"]["labels"]["step"] == "1"
    expected = trim(kube.store.get(rtype(kube, JOB), "default", "trimmed"), JOB)
    assert [e.type for e in first] == ["ADDED", "ADDED"] and [e.type for e in changed] == ["MODIFIED"] * 2
    assert first[0].object == first[1].object == trim(stored, JOB)
    assert changed[0].object == changed[1].object == expected


async def test_the_list_is_read_in_pages_and_every_object_is_primed(kube, hook, monkeypatch):
    """A LIST is read ``LIST_PAGE`` objects at a time (what decoding a whole LIST at once took stays with the
    process); the subscribers see every object of every page, and the watch goes on from the list's
    version."""
    monkeypatch.setattr(watch_module, "LIST_PAGE", 2)
    hub = WatchHub()
    for i in range(5):
        create(kube, f"job-{i}", {"paged": "yes"})
    async with hub.subscribe(hook, JOB, "default", label_selector="paged=yes") as events:
        seen = sorted([(await next_event(events)).name for _ in range(5)])
        await watch_open(kube)
        create(kube, "job-5", {"paged": "yes"})
        later = await next_event(events)
    assert seen == [f"job-{i}" for i in range(5)]
    assert (later.type, later.name) == ("ADDED", "job-5")
    pages = lists(kube)
    assert [r.query.get("limit") for r in pages] == ["2", "2", "2"]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]
    assert hub.stats.lists == 1

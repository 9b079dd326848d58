"""RemoteApi, the ClusterApi over HTTP, against localkube's own server: the mirror reads its own writes at
once, emits each change once (the watch event of an own write is not emitted again), follows other clients'
writes through its watch, and skips a resource type the server does not serve."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from localkube.cluster import LocalKube
from localkube.errors import ApiError
from localkube.remote import Mirror, RemoteApi
from localkube.resources import CONFIGMAPS, PODS, ResourceType
from localkube.subscriptions import Subscription

WIDGETS = ResourceType("example.com", "v1", "widgets", "Widget", "widget")
MERGE = "application/merge-patch+json"


@pytest.fixture
async def remote(kube: LocalKube, kubeconfig: Path) -> AsyncIterator[RemoteApi]:
    api = RemoteApi.from_kubeconfig(kubeconfig, [CONFIGMAPS, PODS, WIDGETS])
    await asyncio.to_thread(api.sync)
    api.start(asyncio.get_running_loop())
    try:
        yield api
    finally:
        await asyncio.to_thread(api.close)


async def changes_until(sub: Subscription, last_name: str) -> list[tuple[str, str, dict | None]]:
    """(type, name, data) of every change the subscription emits, up to the first of object `last_name`."""
    seen = []

    async def collect() -> None:
        async for event in sub:
            seen.append((event.type, event.object["metadata"]["name"], event.object.get("data")))
            if event.object["metadata"]["name"] == last_name:
                return

    await asyncio.wait_for(collect(), 30)
    return seen


async def test_own_writes_are_read_at_once_and_emitted_once(kube: LocalKube, remote: RemoteApi) -> None:
    sub = remote.subscribe(CONFIGMAPS)
    remote.create(CONFIGMAPS, "default", {"metadata": {"name": "mine"}, "data": {"step": "1"}})
    assert remote.get(CONFIGMAPS, "default", "mine")["data"] == {"step": "1"}  # before any watch event
    remote.patch(CONFIGMAPS, "default", "mine", {"data": {"step": "2"}}, MERGE)
    assert remote.get(CONFIGMAPS, "default", "mine")["data"] == {"step": "2"}
    remote.delete(CONFIGMAPS, "default", "mine")
    with pytest.raises(ApiError) as gone:
        remote.get(CONFIGMAPS, "default", "mine")
    assert gone.value.code == 404
    # Another client's write after ours: once the watch brings it, it has brought our three changes too.
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "marker"}})

    seen = await changes_until(sub, "marker")

    assert seen == [
        ("ADDED", "mine", {"step": "1"}),
        ("MODIFIED", "mine", {"step": "2"}),
        ("DELETED", "mine", {"step": "2"}),
        ("ADDED", "marker", None),
    ]
    assert [o["metadata"]["name"] for o in remote.list(CONFIGMAPS, "default")] == ["marker"]


async def test_other_clients_writes_arrive_through_the_watch(kube: LocalKube, remote: RemoteApi) -> None:
    sub = remote.subscribe(CONFIGMAPS)
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "before"}})
    kube.store.patch(CONFIGMAPS, "default", "before", {"data": {"a": "b"}}, MERGE)
    kube.store.delete(CONFIGMAPS, "default", "before")
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "last"}})

    seen = await changes_until(sub, "last")

    assert [(t, n) for t, n, _ in seen] == [
        ("ADDED", "before"),
        ("MODIFIED", "before"),
        ("DELETED", "before"),
        ("ADDED", "last"),
    ]
    assert (
        remote.get(CONFIGMAPS, "default", "last")["metadata"]["uid"]
        == (kube.store.get(CONFIGMAPS, "default", "last")["metadata"]["uid"])
    )


async def test_a_type_the_server_does_not_serve_is_skipped(
    kube: LocalKube, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = RemoteApi.from_kubeconfig(kubeconfig, [CONFIGMAPS, WIDGETS])
    with caplog.at_level(logging.INFO, logger="localkube.remote"):
        await asyncio.to_thread(api.sync)
    try:
        assert api.skipped == [WIDGETS]
        assert [r.getMessage() for r in caplog.records] == [
            "localkube agent: the server does not serve widgets.example.com; not watching it"
        ]
        with pytest.raises(ApiError) as missing:
            api.resource_type("example.com", "v1", "widgets")
        assert missing.value.code == 404
        assert api.resource_type("", "v1", "configmaps") == CONFIGMAPS
    finally:
        await asyncio.to_thread(api.close)


async def test_server_errors_come_back_as_api_errors(remote: RemoteApi) -> None:
    remote.create(CONFIGMAPS, "default", {"metadata": {"name": "twice"}})
    with pytest.raises(ApiError) as exists:
        remote.create(CONFIGMAPS, "default", {"metadata": {"name": "twice"}})
    assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as no_namespace:
        remote.create(CONFIGMAPS, "nowhere", {"metadata": {"name": "x"}})
    assert (no_namespace.value.code, no_namespace.value.message) == (404, 'namespaces "nowhere" not found')


def _cm(name: str, rv: int, data: str = "") -> dict:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)}
    return {"metadata": meta, "data": {"d": data}}


def test_the_mirror_lets_in_only_newer_states() -> None:
    mirror = Mirror()
    mirror.register(CONFIGMAPS)
    assert mirror.apply("ADDED", CONFIGMAPS, _cm("a", 5, "five"))
    assert not mirror.apply("MODIFIED", CONFIGMAPS, _cm("a", 5, "five again"))  # the same state
    assert not mirror.apply("MODIFIED", CONFIGMAPS, _cm("a", 4, "older"))
    assert mirror.get(CONFIGMAPS, "default", "a")["data"] == {"d": "five"}
    assert mirror.apply("MODIFIED", CONFIGMAPS, _cm("a", 7, "seven"))
    assert mirror.apply("DELETED", CONFIGMAPS, _cm("a", 8))
    assert not mirror.apply("DELETED", CONFIGMAPS, _cm("a", 9))  # deleted already
    assert not mirror.apply("MODIFIED", CONFIGMAPS, _cm("a", 7, "late"))  # a state from before the delete
    assert mirror.list(CONFIGMAPS) == []
    assert mirror.apply("ADDED", CONFIGMAPS, _cm("a", 10, "again"))  # created anew under the name
    assert not mirror.apply("ADDED", PODS, _cm("p", 11))  # a type it does not mirror


def test_a_relist_deletes_what_the_server_no_longer_has() -> None:
    mirror = Mirror()
    mirror.register(CONFIGMAPS)
    mirror.apply("ADDED", CONFIGMAPS, _cm("kept", 1))
    mirror.apply("ADDED", CONFIGMAPS, _cm("gone", 2))
    mirror.replace_all(CONFIGMAPS, [_cm("kept", 3, "new"), _cm("fresh", 4)], 9)
    assert [(o["metadata"]["name"], o["data"]["d"]) for o in mirror.list(CONFIGMAPS)] == [
        ("fresh", ""),
        ("kept", "new"),
    ]


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for a condition the test cannot be told about (a request the server saw), at most 10 s."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {what} within 10 s")


async def test_the_mirror_relists_after_an_expired_watch_and_resumes_after_a_restart(
    kube: LocalKube, remote: RemoteApi
) -> None:
    def lists() -> int:
        return sum(1 for r in kube.requests if r.path.endswith("/configmaps") and "watch" not in r.query)

    sub = remote.subscribe(CONFIGMAPS)
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "doomed"}})
    assert (await changes_until(sub, "doomed"))[-1][:2] == ("ADDED", "doomed")
    kube.faults.expire_watch(1, resource="configmaps")
    kube.faults.end_watches()
    await until(lambda: lists() == 2, "second LIST of configmaps after the 410")
    kube.store.delete(CONFIGMAPS, "default", "doomed")
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "after-expiry"}})
    assert [(t, n) for t, n, _ in await changes_until(sub, "after-expiry")] == [
        ("DELETED", "doomed"),
        ("ADDED", "after-expiry"),
    ]

    await asyncio.to_thread(kube.faults.restart)  # every connection cut: each watch resumes from its version
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "after-restart"}})

    assert [(t, n) for t, n, _ in await changes_until(sub, "after-restart")] == [("ADDED", "after-restart")]
    assert lists() == 2  # resumed, not listed again
    names = [o["metadata"]["name"] for o in remote.list(CONFIGMAPS, "default")]
    assert names == ["after-expiry", "after-restart"]


async def test_a_delete_held_by_a_finalizer_keeps_the_object(kube: LocalKube, remote: RemoteApi) -> None:
    sub = remote.subscribe(CONFIGMAPS)
    remote.create(CONFIGMAPS, "default", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    remote.delete(CONFIGMAPS, "default", "held")

    assert remote.get(CONFIGMAPS, "default", "held")["metadata"]["deletionTimestamp"]
    kube.store.patch(CONFIGMAPS, "default", "held", {"metadata": {"finalizers": None}}, MERGE)
    kube.store.create(CONFIGMAPS, "default", {"metadata": {"name": "marker"}})

    assert [(t, n) for t, n, _ in await changes_until(sub, "marker")] == [
        ("ADDED", "held"),
        ("MODIFIED", "held"),  # the deletionTimestamp
        ("DELETED", "held"),  # the finalizer removed: through the watch
        ("ADDED", "marker"),
    ]
    assert [o["metadata"]["name"] for o in remote.list(CONFIGMAPS, "default")] == ["marker"]

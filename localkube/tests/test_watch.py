"""Watch through both clients' Watch helpers: resume, 410 and relist, bookmarks, timeoutSeconds, selectors."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import kubernetes_asyncio
import pytest
from conftest import Server
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.resources import PODS

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


SENTINEL = "zz-sentinel"  # sorts after every other name: the last object a listing watch reports


def tfjob(name: str, **labels: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}},
    }


def create(custom: client.CustomObjectsApi, ns: str, name: str, **labels: str) -> dict:
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, tfjob(name, **labels))


def until_sentinel(custom: client.CustomObjectsApi, ns: str, **kwargs: object) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of every event up to the sentinel's ADDED, which the caller created
    last: what the server sent before it, with no wait that bets on its speed."""
    w = watch.Watch()
    events = []
    for e in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, **kwargs):
        meta = e["raw_object"]["metadata"]
        events.append((e["type"], meta.get("name", ""), meta["resourceVersion"]))
        if (e["type"], meta.get("name")) == ("ADDED", SENTINEL):
            w.stop()
    assert events[-1][:2] == ("ADDED", SENTINEL)
    return events[:-1]


def stream(kube: LocalKube, custom: client.CustomObjectsApi, **kwargs: object) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of every event until localkube ends the stream (after 0.3 s: a fault
    stands in for the server's own stream timeout; timeout_seconds keeps the client from re-watching)."""
    kube.faults.end_watch_after(0.3, resource=PLURAL)
    kwargs.setdefault("timeout_seconds", 30)
    events = watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, **kwargs
    )
    return [
        (
            e["type"],
            e["raw_object"]["metadata"].get("name", ""),
            e["raw_object"]["metadata"]["resourceVersion"],
        )
        for e in events
    ]


def test_watch_from_a_version_gets_only_later_changes(custom: client.CustomObjectsApi, ns: str) -> None:
    create(custom, ns, "old")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    create(custom, ns, "new")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "old")
    create(custom, ns, SENTINEL)
    events = until_sentinel(custom, ns, resource_version=listed["metadata"]["resourceVersion"])
    assert [(t, n) for t, n, _ in events] == [("ADDED", "new"), ("DELETED", "old")]
    assert int(events[0][2]) < int(events[1][2])


@pytest.mark.parametrize("version", [None, "0"])
def test_watch_without_version_starts_with_current_objects(
    custom: client.CustomObjectsApi, ns: str, version: str | None
) -> None:
    create(custom, ns, "a")
    create(custom, ns, "b")
    create(custom, ns, SENTINEL)
    kwargs = {} if version is None else {"resource_version": version}
    assert [(t, n) for t, n, _ in until_sentinel(custom, ns, **kwargs)] == [("ADDED", "a"), ("ADDED", "b")]


def test_too_old_version_gets_410_then_relist_works(custom: client.CustomObjectsApi, ns: str) -> None:
    """Version "1" is long gone on both: localkube keeps the last 50 changes (the patches below push it
    out), kube-apiserver's watch cache starts at the version it first listed."""
    create(custom, ns, "a")
    for i in range(55):
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "a", {"metadata": {"labels": {"i": str(i)}}}
        )
    with pytest.raises(ApiException) as expired:
        until_sentinel(custom, ns, resource_version="1", timeout_seconds=30)
    assert expired.value.status == 410
    assert str(expired.value.reason).startswith("Expired: too old resource version: 1 (")
    relisted = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    create(custom, ns, "b")
    create(custom, ns, SENTINEL)
    events = until_sentinel(custom, ns, resource_version=relisted["metadata"]["resourceVersion"])
    assert [(t, n) for t, n, _ in events] == [("ADDED", "b")]


def test_bookmarks_carry_a_resumable_version(custom: client.CustomObjectsApi, ns: str) -> None:
    """Both mark the end of the initial events with a bookmark (later ones come at the server's discretion:
    localkube's fixture every 0.2 s)."""
    create(custom, ns, "a")
    w = watch.Watch()
    seen = []
    for event in w.stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        ns,
        PLURAL,
        allow_watch_bookmarks=True,
        timeout_seconds=4,
    ):
        seen.append(event["type"])
        if event["type"] == "BOOKMARK":
            assert event["raw_object"]["kind"] == "TFJob"
            meta = event["raw_object"]["metadata"]  # the end of the initial events (the current objects)
            assert set(meta) == {"resourceVersion", "annotations"}
            assert meta["annotations"] == {"k8s.io/initial-events-end": "true"}
            w.stop()
    assert seen == ["ADDED", "BOOKMARK"]
    create(custom, ns, "b")
    create(custom, ns, SENTINEL)
    events = until_sentinel(custom, ns, resource_version=w.resource_version)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "b")]


def test_label_selected_watch_reports_transitions(custom: client.CustomObjectsApi, ns: str) -> None:
    created = create(custom, ns, "a", team="x")
    for team in ("y", "x"):
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "a", {"metadata": {"labels": {"team": team}}}
        )
    create(custom, ns, "other", team="z")
    create(custom, ns, SENTINEL, team="x")
    events = until_sentinel(
        custom, ns, resource_version=created["metadata"]["resourceVersion"], label_selector="team=x"
    )
    assert [(t, n) for t, n, _ in events] == [("DELETED", "a"), ("ADDED", "a")]
    by_field = until_sentinel(custom, ns, field_selector="metadata.name!=a")
    assert [(t, n) for t, n, _ in by_field] == [("ADDED", "other")]


@pytest.mark.parametrize("spelling", ["true", "True", "1"])
def test_every_watch_spelling_streams_events(
    server: Server, custom: client.CustomObjectsApi, ns: str, spelling: str
) -> None:
    create(custom, ns, "a")
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}?watch={spelling}&timeoutSeconds=1"
    lines = [json.loads(line) for line in server.get(path).splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "a")]


def test_forced_410_reaches_the_client(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    kube.faults.expire_watch(resource="tfjobs")
    with pytest.raises(ApiException) as expired:
        stream(kube, custom)
    assert expired.value.status == 410
    assert stream(kube, custom) == []  # the fault was used up


def test_ended_watch_stream_lets_the_client_rewatch(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    first = create(custom, "default", "a")
    events = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    kube.faults.end_watch_after(0, resource="tfjobs")  # the first watch ends at once, without a bookmark
    assert next(events)["raw_object"]["metadata"]["name"] == "a"
    create(custom, "default", "b")
    assert next(events)["raw_object"]["metadata"]["name"] == "b"  # the client watched again from "a"
    events.close()
    watches = [r.query for r in kube.requests if r.method == "GET"]
    assert [q.get("watch") for q in watches] == ["True", "True"]
    assert watches[1]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_async_client_watch(kubeconfig: Path, ns: str) -> None:
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        custom = kubernetes_asyncio.client.CustomObjectsApi(api)
        created = await custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, tfjob("a"))
        assert created["metadata"]["uid"]
        # kubernetes_asyncio 36 sends a dict as json-patch unless told otherwise (the real server answers 400)
        change = {"spec": {"runPolicy": {"backoffLimit": 1}}}
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "a", change, _content_type="application/merge-patch+json"
        )
        events = []
        async with kubernetes_asyncio.watch.Watch() as w:
            async for event in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                resource_version=created["metadata"]["resourceVersion"],
                allow_watch_bookmarks=True,
                timeout_seconds=4,
            ):
                events.append(event["type"])
                if event["type"] == "BOOKMARK":
                    w.stop()
        assert events == ["MODIFIED", "BOOKMARK"]
        got = await custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a")
        assert got["spec"]["runPolicy"]["backoffLimit"] == 1


def test_concurrent_writers_reach_a_watcher_once_and_in_order(
    kube: LocalKube, custom: client.CustomObjectsApi
) -> None:
    create(
        custom, "default", "first"
    )  # a version to watch from ("0" would list the current pods by name instead)
    start = kube.store.resource_version

    def writer(prefix: str) -> None:
        for i in range(20):
            kube.store.create(
                PODS,
                "default",
                {
                    "metadata": {"name": f"{prefix}-{i}"},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            )

    threads = [threading.Thread(target=writer, args=(p,)) for p in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    core = client.CoreV1Api(custom.api_client)
    kube.faults.end_watch_after(0.3, resource="pods")
    events = list(
        watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30)
    )
    pods = [e["object"] for e in events]
    assert all(isinstance(p, client.V1Pod) for p in pods)  # typed deserialization works on our objects
    assert sorted(p.metadata.name for p in pods) == sorted(f"{x}-{i}" for x in "ab" for i in range(20))
    versions = [int(p.metadata.resource_version) for p in pods]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)

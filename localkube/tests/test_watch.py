"""Watch through both clients' Watch helpers: resume, 410 and relist, bookmarks, timeoutSeconds, selectors."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import kubernetes_asyncio
import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.resources import PODS

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


def tfjob(name: str, **labels: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
    }


def create(custom: client.CustomObjectsApi, name: str, **labels: str) -> dict:
    return custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, tfjob(name, **labels))


def stream(kube: LocalKube, custom: client.CustomObjectsApi, **kwargs: object) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of every event until the server ends the stream (after 0.3 s: a fault
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


def test_watch_from_a_version_gets_only_later_changes(
    kube: LocalKube, custom: client.CustomObjectsApi
) -> None:
    create(custom, "old")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    create(custom, "new")
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "old")
    events = stream(kube, custom, resource_version=listed["metadata"]["resourceVersion"])
    assert [(t, n) for t, n, _ in events] == [("ADDED", "new"), ("DELETED", "old")]
    assert int(events[0][2]) < int(events[1][2])


def test_watch_without_version_starts_with_current_objects(
    kube: LocalKube, custom: client.CustomObjectsApi
) -> None:
    create(custom, "a")
    create(custom, "b")
    assert [(t, n) for t, n, _ in stream(kube, custom)] == [("ADDED", "a"), ("ADDED", "b")]
    assert [(t, n) for t, n, _ in stream(kube, custom, resource_version="0")] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_too_old_version_gets_410_then_relist_works(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    first = create(custom, "a")
    for i in range(kube.store.history_size + 5):
        custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a", {"spec": {"i": i}})
    with pytest.raises(ApiException) as expired:
        stream(kube, custom, resource_version=first["metadata"]["resourceVersion"])
    assert expired.value.status == 410
    assert "too old resource version" in str(expired.value.reason)
    relisted = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    create(custom, "b")
    assert [
        (t, n) for t, n, _ in stream(kube, custom, resource_version=relisted["metadata"]["resourceVersion"])
    ] == [("ADDED", "b")]


def test_forced_410_reaches_the_client(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    kube.faults.expire_watch(resource="tfjobs")
    with pytest.raises(ApiException) as expired:
        stream(kube, custom)
    assert expired.value.status == 410
    assert stream(kube, custom) == []  # the fault was used up


def test_bookmarks_carry_a_resumable_version(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    create(custom, "a")
    w = watch.Watch()
    seen = []
    for event in w.stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ):
        seen.append(event["type"])
        if event["type"] == "BOOKMARK":
            assert event["raw_object"]["kind"] == "TFJob"
    assert seen[0] == "ADDED" and seen[-1] == "BOOKMARK" and seen.count("BOOKMARK") >= 2
    assert w.resource_version == kube.store.resource_version
    create(custom, "b")
    assert [(t, n) for t, n, _ in stream(kube, custom, resource_version=w.resource_version)] == [
        ("ADDED", "b")
    ]


def test_label_selected_watch_reports_transitions(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    created = create(custom, "a", team="x")
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"metadata": {"labels": {"team": "y"}}}
    )
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"metadata": {"labels": {"team": "x"}}}
    )
    create(custom, "other", team="z")
    events = stream(
        kube, custom, resource_version=created["metadata"]["resourceVersion"], label_selector="team=x"
    )
    assert [(t, n) for t, n, _ in events] == [("DELETED", "a"), ("ADDED", "a")]
    by_field = stream(kube, custom, field_selector="metadata.name=other")
    assert [(t, n) for t, n, _ in by_field] == [("ADDED", "other")]


@pytest.mark.parametrize("spelling", ["true", "True", "1"])
def test_every_watch_spelling_streams_events(
    kube: LocalKube, custom: client.CustomObjectsApi, spelling: str
) -> None:
    create(custom, "a")
    kube.faults.end_watch_after(0.1)
    url = f"{kube.url}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}?watch={spelling}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {kube.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        lines = [json.loads(line) for line in response.read().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "a")]


def test_ended_watch_stream_lets_the_client_rewatch(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    first = create(custom, "a")
    events = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    kube.faults.end_watch_after(0, resource="tfjobs")  # the first watch ends at once, without a bookmark
    assert next(events)["raw_object"]["metadata"]["name"] == "a"
    create(custom, "b")
    assert next(events)["raw_object"]["metadata"]["name"] == "b"  # the client watched again from "a"
    events.close()
    watches = [r.query for r in kube.requests if r.method == "GET"]
    assert [q.get("watch") for q in watches] == ["True", "True"]
    assert watches[1]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_async_client_watch(kube: LocalKube, kubeconfig: Path) -> None:
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        custom = kubernetes_asyncio.client.CustomObjectsApi(api)
        created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, tfjob("a"))
        assert created["metadata"]["uid"]
        # kubernetes_asyncio 36 sends a dict as json-patch unless told otherwise (the real server answers 400)
        await custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "a",
            {"spec": {"x": 1}},
            _content_type="application/merge-patch+json",
        )
        events = []
        async with kubernetes_asyncio.watch.Watch() as w:
            async for event in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                resource_version=created["metadata"]["resourceVersion"],
                allow_watch_bookmarks=True,
                timeout_seconds=1,
            ):
                events.append((event["type"], event["raw_object"]["metadata"]["resourceVersion"]))
        assert events[0][0] == "MODIFIED" and events[-1][0] == "BOOKMARK"
        got = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
        assert got["spec"] == {"x": 1}


def test_concurrent_writers_reach_a_watcher_once_and_in_order(
    kube: LocalKube, custom: client.CustomObjectsApi
) -> None:
    create(custom, "first")  # a version to watch from ("0" would list the current pods by name instead)
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

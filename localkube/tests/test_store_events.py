"""record_event: core v1 Events like a cluster's, deduplicated by (object, reason, message) with a count."""

from __future__ import annotations

import pytest
from kubernetes import client
from localkube.cluster import LocalKube
from localkube.events import record_event
from localkube.resources import PODS

from localkube import events


def test_events_are_recorded_and_deduplicated(kube: LocalKube, core: client.CoreV1Api) -> None:
    pod = kube.store.create(
        PODS,
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    )
    first = record_event(
        kube.store, pod, "Warning", "BackOff", "Back-off restarting failed container", "kubelet"
    )
    record_event(kube.store, pod, "Warning", "BackOff", "Back-off restarting failed container", "kubelet")
    record_event(kube.store, pod, "Normal", "Pulling", 'Pulling image "busybox"', "kubelet")
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p,involvedObject.kind=Pod"
    )
    by_reason = {e.reason: e for e in events.items}
    assert set(by_reason) == {"BackOff", "Pulling"}
    backoff = by_reason["BackOff"]
    assert (backoff.count, backoff.type, backoff.source.component) == (2, "Warning", "kubelet")
    assert backoff.metadata.name == first["metadata"]["name"] and backoff.metadata.name.startswith("p.")
    assert backoff.involved_object.uid == pod["metadata"]["uid"]
    assert backoff.first_timestamp <= backoff.last_timestamp
    warnings = core.list_namespaced_event("default", field_selector="type=Warning")
    assert [e.reason for e in warnings.items] == ["BackOff"]


def _reasons(core: client.CoreV1Api, namespace: str = "default") -> list[tuple[str, int]]:
    return sorted((e.reason, e.count) for e in core.list_namespaced_event(namespace).items)


def test_deleting_an_event_through_the_api_starts_a_fresh_count(
    kube: LocalKube, core: client.CoreV1Api
) -> None:
    pod = kube.store.create(
        PODS,
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    )
    first = record_event(kube.store, pod, "Warning", "BackOff", "back-off", "kubelet")
    record_event(kube.store, pod, "Warning", "BackOff", "back-off", "kubelet")
    core.delete_namespaced_event(first["metadata"]["name"], "default")
    again = record_event(kube.store, pod, "Warning", "BackOff", "back-off", "kubelet")
    assert again["metadata"]["name"] != first["metadata"]["name"]
    assert _reasons(core) == [("BackOff", 1)]


def test_an_event_edited_through_the_api_is_found_by_its_new_message(
    kube: LocalKube, core: client.CoreV1Api
) -> None:
    pod = kube.store.create(
        PODS,
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    )
    first = record_event(kube.store, pod, "Normal", "Pulling", "old", "kubelet")
    core.patch_namespaced_event(first["metadata"]["name"], "default", {"message": "new"})
    bumped = record_event(kube.store, pod, "Normal", "Pulling", "new", "kubelet")
    fresh = record_event(kube.store, pod, "Normal", "Pulling", "old", "kubelet")
    assert (bumped["metadata"]["name"], bumped["count"]) == (first["metadata"]["name"], 2)
    assert fresh["metadata"]["name"] != first["metadata"]["name"] and fresh["count"] == 1


def test_events_outlive_their_object_and_a_namesake_gets_its_own(
    kube: LocalKube, core: client.CoreV1Api
) -> None:
    spec = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    old = kube.store.create(PODS, "default", spec)
    record_event(kube.store, old, "Normal", "Scheduled", "assigned", "default-scheduler")
    core.delete_namespaced_pod("p", "default")
    new = kube.store.create(PODS, "default", spec)
    record_event(kube.store, new, "Normal", "Scheduled", "assigned", "default-scheduler")
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=p").items
    assert sorted(e.involved_object.uid for e in events) == sorted(
        [old["metadata"]["uid"], new["metadata"]["uid"]]
    )
    assert [e.count for e in events] == [1, 1]


def test_each_namespace_keeps_its_newest_events(
    kube: LocalKube, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "MAX_EVENTS_PER_NAMESPACE", 3)
    kube.create_namespaces("other")
    pods = {
        ns: kube.store.create(
            PODS, ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        )
        for ns in ("default", "other")
    }
    record_event(kube.store, pods["other"], "Normal", "Kept", "in another namespace", "kubelet")
    for reason in ("A", "B", "C"):
        record_event(kube.store, pods["default"], "Normal", reason, reason, "kubelet")
    record_event(kube.store, pods["default"], "Normal", "A", "A", "kubelet")  # bumped: recorded last now
    record_event(kube.store, pods["default"], "Normal", "D", "D", "kubelet")
    assert _reasons(core) == [("A", 2), ("C", 1), ("D", 1)]
    assert _reasons(core, "other") == [("Kept", 1)]

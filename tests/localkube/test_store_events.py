"""record_event: core v1 Events like a cluster's, deduplicated by (object, reason, message) with a count."""

from __future__ import annotations

from kubernetes import client

from airflow_provider_training.localkube.cluster import LocalKube
from airflow_provider_training.localkube.events import record_event
from airflow_provider_training.localkube.resources import PODS


def test_events_are_recorded_and_deduplicated(kube: LocalKube, core: client.CoreV1Api) -> None:
    pod = kube.store.create(PODS, "default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
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

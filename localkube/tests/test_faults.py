"""Programmed faults reach the real client as a real server's would: 429, 5xx, drops, 410, restart."""

from __future__ import annotations

import json
import urllib.request

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.faults import FaultRule

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "xgboostjobs"


def job(name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "XGBoostJob", "metadata": {"name": name}, "spec": {}}


def get(custom: client.CustomObjectsApi, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)


def test_429_with_retry_after_reaches_the_client(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("a"))
    kube.faults.throttle(count=1, retry_after=3, method="GET", resource=PLURAL)
    with pytest.raises(ApiException) as throttled:
        get(custom, "a")
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "3"
    body = json.loads(throttled.value.body)
    assert (body["kind"], body["reason"], body["details"]["retryAfterSeconds"]) == (
        "Status",
        "TooManyRequests",
        3,
    )
    assert get(custom, "a")["metadata"]["name"] == "a"  # only the next matching request


@pytest.mark.parametrize(("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_server_errors(kube: LocalKube, custom: client.CustomObjectsApi, code: int, reason: str) -> None:
    kube.faults.fail(code, count=2, method="POST")
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("a"))
        assert (failed.value.status, json.loads(failed.value.body)["reason"]) == (code, reason)
    assert custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("a"))
    assert [r.status for r in kube.write_requests()] == [code, code, 201]


def test_rules_match_by_path_and_resource_only(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    kube.faults.fail(500, count=None, path=r"/pods$")
    kube.faults.fail(503, count=None, resource="tfjobs.kubeflow.org")
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
    with pytest.raises(ApiException) as tf:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", "tfjobs")
    assert tf.value.status == 503
    with pytest.raises(ValueError, match="unknown fault action"):
        FaultRule("explode")


def test_dropped_connection(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    kube.faults.drop(count=1, method="GET")
    with pytest.raises(urllib3.exceptions.HTTPError):
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []


def test_latency_delays_but_serves(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    rule = kube.faults.latency(0.05, count=2)
    for _ in range(3):
        assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
    assert rule.hits == 2 and rule not in kube.faults.rules()


def test_restart_drops_connections_and_keeps_state(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("a"))
    url = kube.url
    events = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL)
    assert next(events)["type"] == "ADDED"
    kube.faults.restart()
    with pytest.raises(urllib3.exceptions.HTTPError):
        next(events)  # the open watch is cut, not ended cleanly
    assert kube.url == url
    assert get(custom, "a")["metadata"]["name"] == "a"


def test_admin_endpoint_programs_faults(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    def admin(method: str, path: str, body: dict | None = None) -> object:
        request = urllib.request.Request(
            f"{kube.url}/localkube/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {kube.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    admin("POST", "faults", {"action": "status", "code": 429, "retry_after": 2, "resource": PLURAL})
    assert [rule["code"] for rule in admin("GET", "faults")] == [429]  # type: ignore[union-attr]
    with pytest.raises(ApiException) as throttled:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert throttled.value.status == 429 and throttled.value.headers["Retry-After"] == "2"
    admin("POST", "faults", {"action": "status", "code": 500})
    admin("DELETE", "faults")
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []
    recorded = admin("GET", "requests")
    assert [r["status"] for r in recorded] == [429, 200]  # type: ignore[union-attr]

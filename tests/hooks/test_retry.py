"""Which failures are retried, and how long the policy waits."""

from __future__ import annotations

import json

import pytest

from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError
from airflow_provider_training.hooks.retry import RetryPolicy, is_transient


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_throttling_and_server_errors_are_transient(status):
    assert is_transient(KubeApiError(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 415, 422])
def test_client_errors_are_not(status):
    assert not is_transient(KubeApiError(status))


def test_connection_errors_are_transient_as_the_transport_classified_them():
    """Only our own types are looked at: the transport wraps the HTTP client's errors (test_transport.py and
    test_kubeconfig.py raise them from real connections)."""
    assert is_transient(KubeConnectionError("cut", transient=True))
    assert not is_transient(KubeConnectionError("certificate verify failed", transient=False))


@pytest.mark.parametrize("exc", [ValueError("bug"), TimeoutError(), ConnectionError()])
def test_other_errors_are_not(exc):
    assert not is_transient(exc)


def test_retry_after_from_header_or_status_details_wins_and_is_capped():
    policy = RetryPolicy(base_delay=0.01, max_retry_after=5)
    assert policy.delay(1, KubeApiError(429, headers={"Retry-After": "3"})) == 3.0
    assert policy.delay(1, KubeApiError(429, body={"details": {"retryAfterSeconds": 2}})) == 2.0
    assert policy.delay(1, KubeApiError(429, headers={"Retry-After": "120"})) == 5.0


def test_backoff_grows_with_jitter_and_is_bounded():
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0)):
        delays = [policy.delay(attempt, KubeApiError(503)) for _ in range(50)]
        assert all(0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered


async def test_call_stops_at_the_first_permanent_error():
    calls: list[int] = []

    async def fn(attempt: int) -> None:
        calls.append(attempt)
        raise KubeApiError(503) if attempt == 1 else KubeApiError(403)

    with pytest.raises(KubeApiError) as caught:
        await RetryPolicy(attempts=5, base_delay=0).call(fn)
    assert caught.value.status == 403 and calls == [1, 2]


def test_status_error_text_names_code_reason_and_message():
    body = b'{"kind":"Status","code":404,"reason":"NotFound","message":"x not found","details":{"name":"x"}}'
    err = KubeApiError.from_response(404, body, {})
    assert str(err) == "Kubernetes API error 404 NotFound: x not found"
    assert err.status_body["reason"] == "NotFound"


async def test_inside_a_wait_transient_failures_retry_past_the_attempts_until_the_deadline():
    from datetime import UTC, datetime, timedelta

    from airflow_provider_training.hooks.retry import retry_until

    calls: list[int] = []

    async def fn(attempt: int) -> str:
        calls.append(attempt)
        if attempt <= 10:
            raise KubeApiError(429, headers={"Retry-After": "0"})
        return "read"

    policy = RetryPolicy(attempts=3, base_delay=0)
    with retry_until(datetime.now(UTC) + timedelta(seconds=30)):
        assert await policy.call(fn) == "read"
    assert len(calls) == 11
    calls.clear()
    with retry_until(datetime.now(UTC) - timedelta(seconds=1)), pytest.raises(KubeApiError):
        await policy.call(fn)  # the deadline passed: one attempt
    assert calls == [1]
    calls.clear()
    with pytest.raises(KubeApiError):
        await policy.call(fn)  # outside a wait: the policy's attempts
    assert calls == [1, 2, 3]


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/default/pods", [], "list pods in namespace default"),
        ("GET", "/api/v1/namespaces/default/pods", [("watch", "true")], "watch pods in namespace default"),
        ("GET", "/api/v1/namespaces/default/pods/p/log", [], "get pods/log default/p"),
        (
            "GET",
            "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j",
            [],
            "get pytorchjobs.kubeflow.org ns/j",
        ),
        (
            "POST",
            "/apis/kubeflow.org/v1/namespaces/ns/tfjobs",
            [],
            "create tfjobs.kubeflow.org in namespace ns",
        ),
        ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/t", [], "delete jobs.batch ns/t"),
    ],
)
def test_errors_name_the_request_as_rbac_does(method, path, query, expected):
    from airflow_provider_training.kinds.api import describe_request

    request = describe_request(method, path, query)
    assert str(request) == expected
    err = KubeApiError(409, "Conflict", "exists")
    err.request = request
    assert str(err) == f"{expected}: 409 Conflict: exists"


@pytest.mark.parametrize(
    ("method", "path", "query", "permission"),
    [
        ("GET", "/api/v1/namespaces/ml/pods", [], "`list` on `pods` in namespace ml"),
        ("GET", "/api/v1/namespaces/ml/pods", [("watch", "true")], "`watch` on `pods` in namespace ml"),
        ("GET", "/api/v1/namespaces/ml/pods/p/log", [], "`get` on `pods/log` named p in namespace ml"),
        (
            "PATCH",
            "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/j",
            [],
            "`patch` on `pytorchjobs.kubeflow.org` named j in namespace ml",
        ),
        ("GET", "/api/v1/namespaces/ml/events", [], "`list` on `events` in namespace ml"),
    ],
)
def test_a_refusal_names_verb_resource_namespace_and_the_role(method, path, query, permission):
    from airflow_provider_training.kinds.api import describe_request

    said = 'pods is forbidden: User "system:serviceaccount:ml:w" cannot list resource "pods"'
    body = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "message": said, "code": 403}
    err = KubeApiError.from_response(403, json.dumps(body).encode(), {})
    err.request = describe_request(method, path, query)

    assert err.refused == err.request
    assert str(err) == (
        f"Kubernetes refused {permission} (403 Forbidden): the connection's identity lacks this "
        f"permission; docs/rbac.md lists the Role it needs. The API server said: {said}"
    )


def test_a_403_without_a_resource_is_not_called_an_rbac_refusal():
    from airflow_provider_training.kinds.api import describe_request

    err = KubeApiError(403, "Forbidden", "no")
    assert err.refused is None and str(err) == "Kubernetes API error 403 Forbidden: no"
    err.request = describe_request("GET", "/version")
    assert err.refused is None and str(err) == "GET /version: 403 Forbidden: no"

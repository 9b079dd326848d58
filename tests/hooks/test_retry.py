"""Which failures are retried, and how long the policy waits."""

from __future__ import annotations

import aiohttp
import pytest

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import RetryPolicy, is_transient


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_throttling_and_server_errors_are_transient(status):
    assert is_transient(KubeApiError(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 415, 422])
def test_client_errors_are_not(status):
    assert not is_transient(KubeApiError(status))


@pytest.mark.parametrize(
    "exc", [aiohttp.ServerDisconnectedError(), aiohttp.ClientPayloadError("cut"), TimeoutError()]
)
def test_dropped_connections_are_transient(exc):
    assert is_transient(exc)


def test_programming_errors_are_not():
    assert not is_transient(ValueError("bug"))


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
    body = b'{"kind":"Status","code":404,"reason":"NotFound","message":"x not found"}'
    err = KubeApiError.from_response(404, body, {})
    assert str(err) == "Kubernetes API error 404 NotFound: x not found"
    assert err.status_body["reason"] == "NotFound"

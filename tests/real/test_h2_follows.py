"""Log follows over HTTP/2 against the real kube-apiserver (Go's net/http over TLS): many followed pods share
one connection, each a stream, as client-go's follows do (airflow_provider_training.hooks.multiplex)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator

import pytest
import yaml
from localkube.realcluster import RealCluster

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.kubeconfig import static_config
from airflow_provider_training.hooks.multiplex import H2Stream
from airflow_provider_training.hooks.transport import KubeTransport, LineStream
from tests.real.families_real import open_gate

PODS = [f"h2-follow-{n}" for n in range(3)]
GATE = "h2-follows"


def pod(name: str) -> dict:
    script = {"default": {"duration": 0, "logs": ["{pod} first"], "gate": GATE, "after_gate": ["{pod} last"]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"localkube.dev/script": json.dumps(script)},
        },
        "spec": {"containers": [{"name": "main", "image": "example/main:1"}], "restartPolicy": "Never"},
    }


def said_first(cluster: RealCluster, name: str) -> bool:
    try:
        return b"first" in cluster.request("GET", f"/api/v1/namespaces/default/pods/{name}/log")
    except Exception:
        return False  # not running yet


@pytest.fixture
def running(real_cluster: RealCluster) -> Iterator[Callable[..., None]]:
    """Start pods that said their first line (then wait for the gate); deleted after the test."""
    started: list[str] = []

    def start(*names: str) -> None:
        for name in names:
            real_cluster.apply(pod(name))
            started.append(name)
        for name in names:
            real_cluster.wait_for(lambda name=name: said_first(real_cluster, name), 60)

    yield start
    for name in started:
        with contextlib.suppress(Exception):
            real_cluster.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")


@pytest.fixture(scope="module")
def transport_config(real_cluster: RealCluster):
    kubeconfig = yaml.safe_load(real_cluster.kubeconfig.read_text())
    return static_config(kubeconfig, None, str(real_cluster.kubeconfig.parent))


async def read_until(stream, text: str) -> list[str]:
    lines: list[str] = []
    while not any(text in line for line in lines):
        more = await stream.lines()
        assert more is not None, f"the stream ended before {text!r}: {lines}"
        lines += [line.decode() for line in more]
    return lines


async def read_all(stream) -> list[str]:
    lines = []
    while (more := await stream.lines()) is not None:
        lines += [line.decode() for line in more]
    return lines


def succeeded(cluster: RealCluster, name: str) -> bool:
    return cluster.get(f"/api/v1/namespaces/default/pods/{name}")["status"].get("phase") == "Succeeded"


def test_followed_pods_share_one_http2_connection_each_a_stream(real_cluster, transport_config, running):
    running(*PODS)

    async def follow_all() -> dict:
        transport = KubeTransport(transport_config)
        path = "/api/v1/namespaces/default/pods/{}/log"
        try:
            streams = [await transport.follow(path.format(name), query=[("follow", "true")]) for name in PODS]
            seen: dict = {"firsts": [await read_until(s, "first") for s in streams]}  # all open
            pool = transport._pooled()
            assert pool.h2 is not None
            seen["kinds"] = {type(stream) for stream in streams}
            seen["links"] = [(link.protocol, len(link.streams), link.limit) for link in pool.h2.links]
            await asyncio.to_thread(open_gate, real_cluster, GATE)
            seen["lasts"] = [await read_until(s, "last") for s in streams]
            for stream in streams:  # closed before their ends: each stream is reset, the connection closes
                stream.close()
            seen["open after close"] = [len(link.streams) for link in pool.h2.links if not link.closing]
            for name in PODS:
                await asyncio.to_thread(
                    real_cluster.wait_for, lambda name=name: succeeded(real_cluster, name), 60
                )
            # A finished container's log: the server ends the stream (END_STREAM) after the whole log.
            ended = [await transport.follow(path.format(name), query=[("follow", "true")]) for name in PODS]
            seen["whole"] = [await read_all(stream) for stream in ended]
            seen["open after end"] = [len(link.streams) for link in pool.h2.links if not link.closing]
            return seen
        finally:
            await transport.close()

    seen = asyncio.run(follow_all())

    assert seen["kinds"] == {H2Stream}
    (link,) = seen["links"]
    assert link[:2] == ("h2", len(PODS)), "one connection, a stream per followed pod"
    assert link[2] >= 100, "the server's stream limit (--http2-max-streams-per-connection)"
    assert [
        lines[-1].endswith(f"{name} first") for lines, name in zip(seen["firsts"], PODS, strict=True)
    ] == [True] * 3
    assert [lines[-1].endswith(f"{name} last") for lines, name in zip(seen["lasts"], PODS, strict=True)] == [
        True
    ] * 3
    assert seen["open after close"] == [], "the connection closes when its last stream is closed"
    assert seen["whole"] == [[f"{name} first", f"{name} last"] for name in PODS]
    assert seen["open after end"] == [], "and when its last stream ended"


def test_an_error_answer_on_a_stream_is_the_api_error_and_the_connection_goes_on(
    real_cluster, transport_config
):
    real_cluster.apply(pod("h2-follow-err"))
    real_cluster.wait_for(lambda: said_first(real_cluster, "h2-follow-err"), 60)

    async def follow() -> tuple[KubeApiError, list[str], type]:
        transport = KubeTransport(transport_config)
        try:
            live = await transport.follow(
                "/api/v1/namespaces/default/pods/h2-follow-err/log", query=[("follow", "true")]
            )
            with pytest.raises(KubeApiError) as missing:
                await transport.follow(
                    "/api/v1/namespaces/default/pods/no-such-pod/log", query=[("follow", "true")]
                )
            first = await live.lines()
            live.close()
            return missing.value, [line.decode() for line in first or []], type(live)
        finally:
            await transport.close()

    error, first, kind = asyncio.run(follow())

    assert kind is H2Stream
    assert error.status == 404 and "no-such-pod" in str(error)
    assert first and first[0].endswith("h2-follow-err first")


def test_a_server_that_does_not_choose_h2_gets_http1_follows(transport_config, running, monkeypatch):
    """ALPN offering only HTTP/1.1 (as a server without h2 answers): each follow has its own connection."""
    from airflow_provider_training.hooks import transport as transport_module

    monkeypatch.setattr(transport_module, "ALPN", ("http/1.1",))
    running("h2-follow-h1")

    async def follow() -> tuple[type, list[str], bool]:
        transport = KubeTransport(transport_config)
        try:
            stream = await transport.follow(
                "/api/v1/namespaces/default/pods/h2-follow-h1/log", query=[("follow", "true")]
            )
            first = await stream.lines()
            stream.close()
            pool = transport._pooled()
            return type(stream), [line.decode() for line in first or []], bool(pool.h2 and pool.h2.refused)
        finally:
            await transport.close()

    kind, first, refused = asyncio.run(follow())

    assert kind is LineStream and refused
    assert first and first[0].endswith("h2-follow-h1 first")

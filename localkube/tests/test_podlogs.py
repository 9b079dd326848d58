"""Pod logs over HTTP as the kubelet serves them: tail, since, timestamps, previous, follow, errors."""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_asyncio
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.resources import PODS

from tests.operators.harness import wait_for

NS = "default"


def make_pod(kube: LocalKube, name: str, *containers: str) -> None:
    kube.store.create(
        PODS,
        NS,
        {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
        },
    )


def read(core: client.CoreV1Api, pod: str, **kwargs: object) -> str:
    """Read as bytes (kubernetes 36 returns the repr of bytes otherwise) and decode."""
    response = core.read_namespaced_pod_log(pod, NS, _preload_content=False, **kwargs)
    assert response.headers["Content-Type"].startswith("text/plain")
    return response.data.decode()


def error_of(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


def test_read_tail_and_limit(kube: LocalKube, core: client.CoreV1Api) -> None:
    make_pod(kube, "p", "main")
    kube.logs.start_container(NS, "p", "main")
    kube.logs.write(NS, "p", "main", "one\ntwo\nthree\n")
    assert read(core, "p") == "one\ntwo\nthree\n"
    assert read(core, "p", container="main", tail_lines=2) == "two\nthree\n"
    assert read(core, "p", limit_bytes=5) == "one\nt"


def test_timestamps_and_since(kube: LocalKube, core: client.CoreV1Api) -> None:
    make_pod(kube, "p", "main")
    kube.logs.write(NS, "p", "main", "hello")
    stamped = read(core, "p", timestamps=True)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z hello\n", stamped)
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert read(core, "p", since_seconds=3600) == "hello\n"
    url = f"{kube.url}/api/v1/namespaces/{NS}/pods/p/log?sinceTime={future}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {kube.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b""


def test_previous_instance_after_restart(kube: LocalKube, core: client.CoreV1Api) -> None:
    make_pod(kube, "p", "main")
    kube.logs.start_container(NS, "p", "main")
    kube.logs.write(NS, "p", "main", "first run\n")
    with pytest.raises(ApiException) as none_yet:
        read(core, "p", previous=True)
    assert error_of(none_yet) == (400, 'previous terminated container "main" in pod "p" not found')
    kube.logs.close_container(NS, "p", "main")
    kube.logs.start_container(NS, "p", "main")
    kube.logs.write(NS, "p", "main", "second run\n")
    assert read(core, "p") == "second run\n"
    assert read(core, "p", previous=True) == "first run\n"


def test_waiting_and_wrong_container_errors(kube: LocalKube, core: client.CoreV1Api) -> None:
    make_pod(kube, "p", "main", "sidecar")
    with pytest.raises(ApiException) as ambiguous:
        read(core, "p")
    assert error_of(ambiguous) == (
        400,
        "a container name must be specified for pod p, choose one of: [main sidecar]",
    )
    with pytest.raises(ApiException) as creating:
        read(core, "p", container="main")
    assert error_of(creating) == (400, 'container "main" in pod "p" is waiting to start: ContainerCreating')
    kube.store.update_status(
        PODS,
        NS,
        "p",
        {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "main", "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}
            ],
        },
    )
    with pytest.raises(ApiException) as pulling:
        read(core, "p", container="main")
    assert error_of(pulling)[1].endswith("is waiting to start: ImagePullBackOff")
    with pytest.raises(ApiException) as unknown:
        read(core, "p", container="nope")
    assert error_of(unknown) == (400, "container nope is not valid for pod p")
    with pytest.raises(ApiException) as missing:
        read(core, "ghost")
    assert missing.value.status == 404


def test_follow_streams_until_the_container_ends(kube: LocalKube, core: client.CoreV1Api) -> None:
    make_pod(kube, "p", "main")
    kube.logs.write(NS, "p", "main", "before\n")
    response = core.read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)
    received: list[bytes] = []
    first_chunk = threading.Event()

    def consume() -> None:
        for chunk in response.stream(64):
            received.append(chunk)
            first_chunk.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert first_chunk.wait(10)
    kube.logs.write(NS, "p", "main", "during 1\nduring 2\n")
    kube.logs.close_container(NS, "p", "main")
    reader.join(10)
    assert not reader.is_alive()
    assert b"".join(received).decode() == "before\nduring 1\nduring 2\n"


async def test_async_client_reads_and_follows(kube: LocalKube, kubeconfig: Path) -> None:
    make_pod(kube, "p", "main")
    kube.logs.write(NS, "p", "main", "hello\nworld\n")
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        core = kubernetes_asyncio.client.CoreV1Api(api)
        assert await core.read_namespaced_pod_log("p", NS) == "hello\nworld\n"
        response = await core.read_namespaced_pod_log(
            "p", NS, follow=True, timestamps=True, _preload_content=False
        )
        first = await response.content.readline()
        assert first.decode().endswith("Z hello\n")
        kube.logs.write(NS, "p", "main", "more")
        kube.logs.close_container(NS, "p", "main")
        rest = (await response.content.read()).decode().splitlines()
        assert [line.split(" ", 1)[1] for line in rest] == ["world", "more"]


def test_a_follower_going_away_is_no_error(kube: LocalKube, caplog: pytest.LogCaptureFixture) -> None:
    """The connection closes just as new lines wake the follow (the handler's write finds it closing):
    a DEBUG note, no ERROR record or traceback."""
    make_pod(kube, "p", "main")
    kube.logs.write(NS, "p", "main", "before\n")
    url = urlparse(kube.url)
    follower = socket.create_connection((str(url.hostname), int(url.port or 80)))
    follower.sendall(
        f"GET /api/v1/namespaces/{NS}/pods/p/log?follow=true HTTP/1.1\r\nHost: localkube\r\n"
        f"Authorization: Bearer {kube.token}\r\n\r\n".encode()
    )
    received = b""
    while b"before" not in received:
        received += follower.recv(4096)
    caplog.set_level(logging.DEBUG)

    def lines_then_close() -> None:
        """Runs on the server loop: the new lines wake the handler one loop step before the transport
        closes, and the close's connection_lost (which cancels the handler) one step after that write."""
        transport = next(
            c.transport
            for c in kube._runner.server.connections  # type: ignore[union-attr]
            if c.transport and c.transport.get_extra_info("peername") == follower.getsockname()
        )
        kube.logs.write(NS, "p", "main", "after\n")
        kube.loop.call_soon(transport.close)

    kube.call(lines_then_close)

    def handled() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.levelno >= logging.ERROR or "went away" in r.getMessage()]

    assert [r.levelname for r in wait_for(handled)] == ["DEBUG"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    follower.close()

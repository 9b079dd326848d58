"""Pod logs over HTTP as the kubelet serves them: tail, since, timestamps, previous, follow, errors."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_asyncio
import pytest
from conftest import Server
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.resources import PODS
from localkube.runtime.script import ANNOTATION

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


def scripted_pod(core: client.CoreV1Api, ns: str, name: str, script: dict, *containers: str) -> None:
    """A pod the kubelet (localkube's scripted runtime, or the agent's behind the real server) runs as
    ``script`` says."""
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name, "annotations": {ANNOTATION: json.dumps(script)}},
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": c, "image": "busybox"} for c in containers or ("main",)],
            },
        },
    )


def read(core: client.CoreV1Api, pod: str, namespace: str = NS, **kwargs: object) -> str:
    """Read as bytes (kubernetes 36 returns the repr of bytes otherwise) and decode."""
    response = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    if response.status == 204:  # no node yet: no kubelet to ask (kube-apiserver; localkube with a runtime)
        assert response.data == b""
        return ""
    assert response.headers["Content-Type"].startswith("text/plain")
    return response.data.decode()


def read_when(core: client.CoreV1Api, pod: str, ns: str, text: str, **kwargs: object) -> str:
    """The log once it reads ``text`` (the container started and wrote it)."""

    def ready() -> str | None:
        try:
            log = read(core, pod, ns, **kwargs)
        except ApiException as exc:
            if exc.status == 400 and "waiting to start" in json.loads(exc.body)["message"]:
                return None
            raise
        return log if log == text else None

    return str(wait_for(ready))


def error_of(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


RUNNING = {"default": {"duration": None, "logs": ["one", "two", "three"]}}  # then runs until deleted


@pytest.mark.kube_runtime("scripted")
def test_read_tail_and_limit(core: client.CoreV1Api, ns: str) -> None:
    scripted_pod(core, ns, "p", RUNNING)
    assert read_when(core, "p", ns, "one\ntwo\nthree\n") == "one\ntwo\nthree\n"
    assert read(core, "p", ns, container="main", tail_lines=2) == "two\nthree\n"
    assert read(core, "p", ns, limit_bytes=5) == "one\nt"


@pytest.mark.kube_runtime("scripted")
def test_timestamps_and_since(server: Server, core: client.CoreV1Api, ns: str) -> None:
    scripted_pod(core, ns, "p", {"default": {"duration": None, "logs": ["hello"]}})
    read_when(core, "p", ns, "hello\n")
    stamped = read(core, "p", ns, timestamps=True)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z hello\n", stamped)
    assert read(core, "p", ns, since_seconds=3600) == "hello\n"
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert server.get(f"/api/v1/namespaces/{ns}/pods/p/log?sinceTime={future}") == b""


@pytest.mark.kube_runtime("scripted")
def test_previous_instance_after_restart(core: client.CoreV1Api, ns: str) -> None:
    first, second = {"exit_code": 1, "logs": ["first run"]}, {"duration": None, "logs": ["second run"]}
    scripted_pod(core, ns, "p", {"default": {"attempts": [first, second]}})
    assert read_when(core, "p", ns, "second run\n") == "second run\n"
    assert read(core, "p", ns, previous=True) == "first run\n"
    scripted_pod(core, ns, "once", RUNNING)
    read_when(core, "once", ns, "one\ntwo\nthree\n")
    with pytest.raises(ApiException) as none_yet:
        read(core, "once", ns, previous=True)
    # kube-apiserver relays the kubelet's error as the message (the agent's, a Status of its own, quoted)
    code, message = error_of(none_yet)
    assert code == 400 and re.search(
        r'previous terminated container \\?"main\\?" in pod \\?"once\\?"', message
    )


@pytest.mark.kube_runtime("scripted")
def test_container_errors(core: client.CoreV1Api, ns: str) -> None:
    scripted_pod(core, ns, "p", RUNNING, "main", "sidecar")
    with pytest.raises(ApiException) as ambiguous:
        read(core, "p", ns)
    assert error_of(ambiguous) == (
        400,
        "a container name must be specified for pod p, choose one of: [main sidecar]",
    )
    with pytest.raises(ApiException) as unknown:
        read(core, "p", ns, container="nope")
    assert error_of(unknown) == (400, "container nope is not valid for pod p")
    with pytest.raises(ApiException) as missing:
        read(core, "ghost", ns)
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'pods "ghost" not found'


@pytest.mark.kube_runtime("scripted")
def test_a_pod_no_node_has_yet_has_an_empty_log(core: client.CoreV1Api, ns: str) -> None:
    """kube-apiserver answers 204 No Content: there is no kubelet to ask (the scheduler holds the pod)."""
    scripted_pod(core, ns, "p", {"default": {"pending": "Unschedulable"}}, "main", "sidecar")
    wait_for(lambda: core.read_namespaced_pod("p", ns).status.conditions)  # held: PodScheduled False
    assert core.read_namespaced_pod("p", ns).spec.node_name is None
    response = core.read_namespaced_pod_log("p", ns, container="main", _preload_content=False)
    assert (response.status, response.data) == (204, b"")
    with pytest.raises(ApiException) as unknown:  # the container is checked first
        read(core, "p", ns, container="nope")
    assert error_of(unknown) == (400, "container nope is not valid for pod p")


def test_waiting_containers(kube: LocalKube, core: client.CoreV1Api) -> None:
    """Without a runtime, the test is every pod's kubelet: a pod's containers are waiting until it writes."""
    make_pod(kube, "p", "main", "sidecar")
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


@pytest.mark.kube_runtime("scripted")
def test_follow_streams_until_the_container_ends(core: client.CoreV1Api, ns: str) -> None:
    script = {"default": {"duration": 1.0, "logs": ["before", "during 1", "during 2"]}}
    scripted_pod(core, ns, "p", script)
    wait_for(lambda: read(core, "p", ns).startswith("before\n") if running(core, "p", ns) else None)
    response = core.read_namespaced_pod_log("p", ns, follow=True, _preload_content=False)
    received = b"".join(response.stream(64))  # ends when the container does
    assert received.decode() == "before\nduring 1\nduring 2\n"
    wait_for(
        lambda: core.read_namespaced_pod("p", ns).status.phase == "Succeeded"
    )  # the kubelet's next write


def running(core: client.CoreV1Api, pod: str, ns: str) -> bool:
    return core.read_namespaced_pod(pod, ns).status.phase == "Running"


@pytest.mark.kube_runtime("scripted")
async def test_async_client_reads_and_follows(core: client.CoreV1Api, kubeconfig: Path, ns: str) -> None:
    scripted_pod(core, ns, "p", {"default": {"duration": 1.0, "logs": ["hello", "world", "more"]}})
    await asyncio.to_thread(wait_for, lambda: running(core, "p", ns) and read(core, "p", ns))
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        acore = kubernetes_asyncio.client.CoreV1Api(api)
        assert (await acore.read_namespaced_pod_log("p", ns)).startswith("hello\n")
        response = await acore.read_namespaced_pod_log(
            "p", ns, follow=True, timestamps=True, _preload_content=False
        )
        first = await response.content.readline()
        assert first.decode().endswith("Z hello\n")
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

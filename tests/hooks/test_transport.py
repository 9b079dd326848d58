"""The transport over httpx against localkube (HTTP/1.1) and a scripted server on a real socket: streamed
lines, error answers, lost and refused connections (our own error type, transient or not), proxies, the
clients shared per server and event loop, and a dead connection noticed by TCP keepalive. HTTP/2 (one
connection for many streams, the stream cap, a restarting server) is tested against the real
kube-apiserver: tests/real/test_h2_follows.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from airflow_provider_training.hooks import transport as transport_module
from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError
from airflow_provider_training.hooks.kubeconfig import ClusterConfig
from airflow_provider_training.hooks.retry import RetryPolicy, is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.hooks.transport import DEAD_AFTER, KubeTransport, LineStream
from airflow_provider_training.kinds.api import collection_path, encode_query, object_path
from airflow_provider_training.kinds.base import PODS, ResourceRef
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY, requests_to, until
from tests.hooks.test_training_hook import _running_pod

JOB = get_kind("PyTorchJob").resource
LOG = "/api/v1/namespaces/ns/pods/p/log"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedServer:
    """Answers each connection with the pieces pushed to it, each written (and flushed) on its own; ``None``
    closes the connection. Records the request head it received."""

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.request = b""
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.request = await reader.readuntil(b"\r\n\r\n")
        while (piece := await self.pieces.get()) is not None:
            writer.write(piece)
            await writer.drain()
        writer.close()

    def push(self, *pieces: bytes | None) -> None:
        for piece in pieces:
            self.pieces.put_nowait(piece)


@contextlib.asynccontextmanager
async def scripted(**config: str) -> AsyncIterator[tuple[ScriptedServer, KubeTransport]]:
    script = ScriptedServer()
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    script.port = server.sockets[0].getsockname()[1]
    host = config.pop("host", f"http://127.0.0.1:{script.port}")
    transport = KubeTransport(ClusterConfig(host=host, token="t0ken", **config))
    try:
        yield script, transport
    finally:
        script.push(None)
        server.close()
        await transport.close()


async def opened(script: ScriptedServer, transport: KubeTransport, head: bytes = HEAD) -> LineStream:
    script.push(head)
    return await transport.open_stream(LOG, query=[("follow", "true")])


async def test_lines_split_on_newlines_only_across_chunks_and_reads():
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        request = script.request.decode()
        assert request.startswith(f"GET {LOG}?follow=true HTTP/1.1\r\n")
        assert "authorization: bearer t0ken\r\n" in request.lower()
        script.push(chunk(b"one\r\ntw"))  # a log line may hold \r: kept
        assert await stream.lines() == [b"one\r"]
        script.push(chunk(b"o \xe2\x9c"), chunk(b"\x93\n"))  # a character cut across chunks
        assert await stream.lines() == [b"two \xe2\x9c\x93"]
        script.push(chunk(b"three\nfour\n\nfive\n") + chunk(b"last without newline") + b"0\r\n\r\n")
        assert await stream.lines() == [b"three", b"four", b"", b"five"]
        assert await stream.lines() == [b"last without newline"]
        assert await stream.lines() is None
        stream.close()


def test_paths_for_core_and_group_resources():
    job = ResourceRef("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    assert collection_path(job, "ns") == "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs"
    assert object_path(PODS, "ns", "p", "log") == "/api/v1/namespaces/ns/pods/p/log"
    assert collection_path(PODS, None) == "/api/v1/pods"


def test_query_encoding():
    assert encode_query({"watch": True, "previous": False, "tailLines": 5, "sinceTime": None}) == [
        ("watch", "true"),
        ("previous", "false"),
        ("tailLines", "5"),
    ]


async def test_the_server_closing_mid_stream_is_transient_after_the_lines_it_sent():
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        script.push(chunk(b"kept\npartial"))
        assert await stream.lines() == [b"kept"]
        script.push(None)  # closed before the last chunk
        with pytest.raises(KubeConnectionError) as caught:
            await stream.lines()
        assert is_transient(caught.value) and "127.0.0.1" in str(caught.value)


async def test_closed_before_the_answer_is_transient():
    async with scripted() as (script, transport):
        script.push(None)
        with pytest.raises(KubeConnectionError) as caught:
            await transport.open_stream(LOG)
        assert is_transient(caught.value)


async def test_silence_past_the_idle_timeout_is_transient():
    async with scripted() as (script, transport):
        script.push(HEAD)
        stream = await transport.open_stream(LOG, idle_timeout=0.05)
        with pytest.raises(KubeConnectionError, match="sent nothing") as caught:
            await stream.lines()
        assert is_transient(caught.value)
        stream.close()


async def test_a_refused_connection_names_the_server_and_is_transient():
    with contextlib.closing(__import__("socket").socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        transport = KubeTransport(ClusterConfig(host=f"http://127.0.0.1:{port}"))
        with pytest.raises(KubeConnectionError, match=f"127.0.0.1:{port}") as caught:
            await transport.request("GET", LOG)
        assert is_transient(caught.value)
        await transport.close()


async def test_an_error_answer_is_a_kube_api_error_with_its_status_body():
    body = b'{"kind":"Status","code":400,"reason":"BadRequest","message":"container is waiting to start"}'
    async with scripted() as (script, transport):
        head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n" + HEAD.split(b"\r\n", 2)[2]
        script.push(head, chunk(body[:20]), chunk(body[20:]), b"0\r\n\r\n")
        with pytest.raises(KubeApiError) as caught:
            await transport.open_stream(LOG)
    assert caught.value.status == 400 and caught.value.message == "container is waiting to start"
    assert str(caught.value.request) == "get pods/log ns/p"


def test_a_follow_runs_on_uvloop_as_the_api_server_runs_it():
    """The Training tab follows logs in the api-server, whose loop is uvloop's."""
    import uvloop

    async def follow() -> None:
        async with scripted() as (script, transport):
            stream = await opened(script, transport)
            script.push(chunk(b"one\n") + b"0\r\n\r\n")
            assert await stream.lines() == [b"one"]
            assert await stream.lines() is None
            stream.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(follow())


async def test_localkube_429_and_500_answers_are_reported_and_retried(kube, hook):
    name = _running_pod(kube, "faulty")
    kube.logs.write("default", name, "pytorch", "line\n")
    transport = await hook.transport()
    path = f"/api/v1/namespaces/default/pods/{name}/log"
    kube.faults.throttle(path=f"{name}/log", retry_after=7)
    with pytest.raises(KubeApiError) as caught:
        await transport.open_stream(path, query=[("container", "pytorch"), ("follow", "true")])
    assert caught.value.status == 429 and caught.value.retry_after == 7
    assert str(caught.value.request) == f"get pods/log default/{name}"
    kube.faults.fail(500, path=f"{name}/log")  # through the hook a 500 is retried and the follow goes on
    stream = await hook.open_log("default", name, "pytorch", timestamps=False)
    assert await stream.lines() == [b"line"]
    kube.logs.close_container("default", name, "pytorch")
    assert await stream.lines() is None
    stream.close()
    follows = [r for r in requests_to(kube, "pods") if r.query.get("follow") == "true"]
    assert [r.status for r in follows] == [429, 500, 200]


async def test_a_dropped_connection_before_the_answer_is_retried(kube, hook):
    name = _running_pod(kube, "dropped")
    kube.logs.write("default", name, "pytorch", "after the drop\n")
    kube.faults.drop(path=f"{name}/log")
    lines = []
    async for line in hook.follow_log("default", name, "pytorch", timestamps=False):
        lines.append(line)
        kube.logs.close_container("default", name, "pytorch")
    assert lines == ["after the drop"]


@pytest.mark.parametrize("how", ["environment", "proxy-url"])
async def test_through_a_proxy(how, monkeypatch):
    """``HTTP_PROXY`` (as kubectl, the environment's proxy) or ``proxy-url``; the scripted server proxies."""
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with scripted() as (script, _):
        proxy = f"http://127.0.0.1:{script.port}"
        if how == "environment":
            monkeypatch.setenv("HTTP_PROXY", proxy)
        transport = KubeTransport(
            ClusterConfig(host="http://kube.invalid", proxy=proxy if how != "environment" else None)
        )
        script.push(HEAD, chunk(b"via\nthe proxy\n"), b"0\r\n\r\n")
        stream = await transport.open_stream(LOG)
        assert await stream.lines() == [b"via", b"the proxy"]
        assert await stream.lines() is None
        stream.close()
        await transport.close()
    assert script.request.startswith(b"GET http://kube.invalid/api/v1/namespaces/ns/pods/p/log HTTP/1.1")


async def _watch_forever(hook: AsyncTrainingJobHook) -> None:
    async for _event in hook.watch_objects(JOB, "default", timeout_seconds=600):
        pass


async def test_hooks_on_one_connection_share_the_loops_clients_until_the_last_closes(kube, kube_conn):
    hooks = [AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY) for _ in range(3)]
    for hook in hooks:
        assert await hook.get_object(JOB, "absent", "default") is None
    pools = {id((await hook.transport())._pool) for hook in hooks}
    pool = (await hooks[0].transport())._pool
    assert len(pools) == 1 and pool is not None and pool.users == 3
    (lane,) = pool.lanes
    for hook in hooks[:2]:
        await hook.close()
    assert not lane.client.is_closed
    await hooks[2].close()
    assert lane.client.is_closed and pool.lanes == []
    again = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)  # a hook used afterwards: fresh clients
    assert await again.get_object(JOB, "absent", "default") is None
    fresh = (await again.transport())._pool
    assert fresh is not None and fresh is not pool and not fresh.lanes[0].client.is_closed
    await again.close()


async def test_each_event_loop_has_its_own_clients(kube, kube_conn):
    hook = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    await hook.get_object(JOB, "absent", "default")
    here = (await hook.transport())._pool

    def elsewhere() -> tuple[object, bool]:
        async def use() -> tuple[object, bool]:
            other = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
            await other.get_object(JOB, "absent", "default")
            pool = (await other.transport())._pool
            assert pool is not None
            client = pool.lanes[0].client
            await other.close()
            return pool, client.is_closed

        return asyncio.run(use())

    pool, closed = await asyncio.to_thread(elsewhere)
    assert pool is not here and closed  # closed with its loop's last hook, before that loop ended
    await hook.close()


async def test_past_a_lanes_stream_cap_the_next_lane_opens_and_plain_http_builds_no_tls_context(
    kube, kube_conn, monkeypatch
):
    built: list[object] = []
    monkeypatch.setattr(ClusterConfig, "ssl_context", lambda cfg: built.append(cfg) or None)
    monkeypatch.setattr(transport_module, "LANE_STREAMS", 2)
    hook = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    watches = [asyncio.create_task(_watch_forever(hook)) for _ in range(3)]
    try:
        await until(lambda: len([r for r in requests_to(kube, "pytorchjobs", watch=True) if r.status]) == 3)
        pool = (await hook.transport())._pool
        assert pool is not None and [lane.live for lane in pool.lanes] == [2, 1]
        assert await hook.get_object(JOB, "absent", "default") is None  # short requests still get through
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        await hook.close()
    assert built == []  # localkube is http://: no TLS context


SILENCED = r"""
import asyncio, json, subprocess, sys, tempfile, time
from localkube.cluster import LocalKube
from airflow_provider_training.hooks.errors import KubeConnectionError
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from tests.hooks.test_training_hook import _running_pod

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

async def main():
    async with LocalKube(runtime=None, controllers=[]) as kube:
        path = kube.write_kubeconfig(tempfile.mkdtemp() + "/kubeconfig")
        name = _running_pod(kube, "quiet")
        kube.logs.write("default", name, "pytorch", "first\n")
        hook = AsyncTrainingJobHook(None, config_file=str(path))
        stream = await hook.open_log("default", name, "pytorch", timestamps=False)
        assert await stream.lines() == [b"first"]
        subprocess.run(["ip", "link", "set", "lo", "down"], check=True)
        silenced = time.monotonic()
        try:
            await asyncio.wait_for(stream.lines(), 300)
            outcome = "no error"
        except KubeConnectionError as err:
            outcome = f"KubeConnectionError transient={err.transient}"
        print(json.dumps({"seconds": time.monotonic() - silenced, "outcome": outcome}))
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        stream.close()
        await hook.close()

asyncio.run(main())
"""


def test_a_silenced_connection_is_noticed_within_60_seconds(tmp_path: Path):
    """A follow whose connection goes silent (the network namespace's loopback taken down under it: no FIN,
    no RST, nothing) raises a transient error by TCP keepalive, well before the 300 s idle timeout."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-rn", "true"], capture_output=True)
    if unshare is None or probe.returncode != 0 or shutil.which("ip") is None:
        pytest.skip(f"needs `unshare -rn` (a user and network namespace) and `ip`: {probe.stderr!r}")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}:{root / 'localkube' / 'src'}"}
    env["PATH"] = f"{env.get('PATH', '')}:/usr/sbin:/sbin"
    done = subprocess.run(
        [unshare, "-rn", sys.executable, "-c", SILENCED], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["outcome"] == "KubeConnectionError transient=True"
    assert seen["seconds"] < 60 and DEAD_AFTER < 60


async def test_a_certificate_that_cannot_be_verified_fails_at_once_naming_the_server(tmp_path: Path):
    """As kubectl's x509 errors: not retried (a server whose CA the kubeconfig does not name stays so)."""
    from localkube.realcluster import webhook_certificates

    pems = webhook_certificates("some-ca", "localhost")
    for name, pem in pems.items():
        (tmp_path / name).write_bytes(pem)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    retries: list[object] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
    port = server.sockets[0].getsockname()[1]
    hook = AsyncTrainingJobHook(
        None,
        connection_extras={"kube_config": _kubeconfig(f"https://localhost:{port}")},
        retry=RetryPolicy(attempts=4, base_delay=0.01, on_retry=lambda *args: retries.append(args)),
    )
    try:
        with pytest.raises(KubeConnectionError, match="certificate verify failed") as caught:
            await hook.get_object(JOB, "absent", "default")
    finally:
        await hook.close()
        server.close()
    assert not is_transient(caught.value) and f"https://localhost:{port}" in str(caught.value)
    assert retries == []


def _kubeconfig(server: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }

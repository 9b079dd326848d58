"""A followed log on its own connection (``transport.LineStream``): the HTTP/1.1 answer parsed as it comes.

Framing is checked against a scripted server on a real socket that writes exactly the bytes a test gives it,
each write released by the test once the client has handed on the lines before it (no sleeps); errors and
retries against localkube's fault rules; the whole parse against every way one answer can be cut into reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.kubeconfig import ClusterConfig
from airflow_provider_training.hooks.transport import KubeTransport, LineReader, LineStream
from tests.hooks.kube_env import requests_to
from tests.hooks.test_training_hook import _running_pod

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedServer:
    """Answers one connection with the pieces pushed to it, each written (and flushed) on its own; ``None``
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
async def scripted() -> AsyncIterator[tuple[ScriptedServer, KubeTransport]]:
    script = ScriptedServer()
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    script.port = server.sockets[0].getsockname()[1]
    transport = KubeTransport(ClusterConfig(host=f"http://127.0.0.1:{script.port}", token="t0ken"))
    try:
        yield script, transport
    finally:
        script.push(None)
        server.close()
        await transport.close()


async def opened(script: ScriptedServer, transport: KubeTransport, head: bytes = HEAD) -> LineReader:
    script.push(head)
    stream = await transport.follow("/api/v1/namespaces/ns/pods/p/log", query=[("follow", "true")])
    assert isinstance(stream, LineStream)  # no proxy: our own connection, not the session
    return stream


async def test_lines_split_across_chunks_and_a_chunk_split_across_reads():
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        request = script.request.decode()
        assert request.startswith("GET /api/v1/namespaces/ns/pods/p/log?follow=true HTTP/1.1\r\n")
        assert (
            f"Host: 127.0.0.1:{script.port}\r\n" in request and "Authorization: Bearer t0ken\r\n" in request
        )
        # A line cut across two chunks, and a multi-byte character cut across them too.
        script.push(chunk(b"one\ntw"))
        assert await stream.lines() == [b"one"]
        script.push(chunk(b"o \xe2\x9c"), chunk(b"\x93\n"))
        assert await stream.lines() == [b"two \xe2\x9c\x93"]
        # One chunk in two writes, cut in the middle of a line: its first line is handed on before the rest.
        whole = chunk(b"three\nfour\nfive\n")
        script.push(whole[:11])  # "10\r\nthree\nf"
        assert await stream.lines() == [b"three"]
        script.push(whole[11:] + chunk(b"last without newline") + b"0\r\n\r\n")
        assert await stream.lines() == [b"four", b"five"]
        assert await stream.lines() == [b"last without newline"]
        assert await stream.lines() is None
        stream.close()


class Called:
    """A listener for ``call_when_ready``: how often it was called, and a future for its next call."""

    def __init__(self) -> None:
        self.count = 0
        self.next: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def __call__(self) -> None:
        self.count += 1
        if not self.next.done():
            self.next.set_result(None)

    async def wait(self) -> None:
        await self.next
        self.next = asyncio.get_running_loop().create_future()


async def call_back_lines(stream: LineReader, script: ScriptedServer) -> None:
    """Lines, the end and a failure each wake a listener once; ``ready()`` hands on what came without
    waiting; a closed stream calls no listener."""
    called = Called()
    assert stream.ready() == []
    assert stream.call_when_ready(called)
    script.push(chunk(b"one\ntw"))
    await called.wait()
    assert stream.ready() == [b"one"]
    assert stream.ready() == []  # "tw" waits for its newline
    assert stream.call_when_ready(called)
    script.push(chunk(b"o\n") + chunk(b"last") + b"0\r\n\r\n")
    await called.wait()
    assert stream.ready() == [b"two"]
    assert stream.call_when_ready(called)  # the end came already: called from the loop, not from here
    assert called.count == 2
    await called.wait()
    assert stream.ready() == [b"last"]
    assert stream.ready() is None
    stream.close()


async def test_a_stream_calls_back_when_it_has_lines_its_end_or_an_error():
    async with scripted() as (script, transport):
        await call_back_lines(await opened(script, transport), script)
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        called = Called()
        assert stream.call_when_ready(called)
        script.push(chunk(b"kept\n"), None)  # then closed before the body's end
        await called.wait()
        assert stream.ready() == [b"kept"]
        if stream.ready() == []:  # the close came in a read of its own
            assert stream.call_when_ready(called)
            await called.wait()
        with pytest.raises(aiohttp.ClientPayloadError, match="Response payload is not completed"):
            stream.ready()
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        called = Called()
        assert stream.call_when_ready(called)
        stream.close()
        script.push(chunk(b"never read\n"))
        await asyncio.sleep(0)  # (a closed stream's callbacks, if any, would be due by now)
        assert called.count == 0


def test_a_follow_runs_on_uvloop_as_the_api_server_runs_it():
    """The Training tab follows logs in the api-server, whose loop is uvloop's: its TCP transport is not an
    asyncio.Transport subclass (an isinstance check there once ended every tab follow at once)."""
    import uvloop

    async def follow() -> None:
        async with scripted() as (script, transport):
            stream = await opened(script, transport)
            script.push(chunk(b"one\n") + b"0\r\n\r\n")
            assert await stream.lines() == [b"one"]
            assert await stream.lines() is None
            stream.close()
        async with scripted() as (script, transport):  # and as the triggerer's streamer reads one
            await call_back_lines(await opened(script, transport), script)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(follow())


async def test_the_server_closing_mid_stream_is_a_payload_error_after_the_lines_it_sent():
    async with scripted() as (script, transport):
        stream = await opened(script, transport)
        script.push(chunk(b"kept\npartial"))
        assert await stream.lines() == [b"kept"]
        script.push(None)  # closed before the last chunk
        with pytest.raises(aiohttp.ClientPayloadError, match="Response payload is not completed"):
            await stream.lines()


async def test_closed_before_the_answer_is_a_server_disconnect():
    async with scripted() as (script, transport):
        script.push(None)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await transport.follow("/api/v1/namespaces/ns/pods/p/log")


async def test_sized_and_until_close_bodies():
    async with scripted() as (script, transport):
        stream = await opened(script, transport, b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        script.push(b"a\nb")
        assert await stream.lines() == [b"a"]
        script.push(b"\nc\nignored after the length")
        assert await stream.lines() == [b"b", b"c"]
        assert await stream.lines() is None
        stream.close()
    async with scripted() as (script, transport):
        stream = await opened(script, transport, b"HTTP/1.0 200 OK\r\n\r\n")
        script.push(b"x\ny")
        assert await stream.lines() == [b"x"]
        script.push(None)
        assert await stream.lines() == [b"y"]
        assert await stream.lines() is None


async def test_an_error_answer_is_a_kube_api_error_with_its_status_body():
    body = b'{"kind":"Status","code":400,"reason":"BadRequest","message":"container is waiting to start"}'
    async with scripted() as (script, transport):
        head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n" + HEAD.split(b"\r\n", 2)[2]
        script.push(head, chunk(body[:20]), chunk(body[20:]), b"0\r\n\r\n")
        with pytest.raises(KubeApiError) as caught:
            await transport.follow("/api/v1/namespaces/ns/pods/p/log")
    assert caught.value.status == 400 and caught.value.message == "container is waiting to start"
    assert str(caught.value.request) == "get pods/log ns/p"


async def test_silence_past_the_read_timeout_is_a_server_timeout():
    async with scripted() as (script, transport):
        script.push(HEAD)
        stream = await transport.follow("/api/v1/namespaces/ns/pods/p/log", read_timeout=0.05)
        with pytest.raises(aiohttp.ServerTimeoutError, match="Timeout on reading data from socket"):
            await stream.lines()


async def test_a_refused_connection_names_the_host():
    with contextlib.closing(__import__("socket").socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        transport = KubeTransport(ClusterConfig(host=f"http://127.0.0.1:{port}"))
        with pytest.raises(aiohttp.ClientConnectorError, match=f"Cannot connect to host 127.0.0.1:{port}"):
            await transport.follow("/api/v1/namespaces/ns/pods/p/log")
        await transport.close()


@pytest.mark.parametrize(
    "answer",
    [
        HEAD + chunk(b"alpha\nbe") + chunk(b"ta\n") + b"0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + chunk(b"alpha\nbeta\n") + b"0\r\nX-Trailer: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nalpha\nbeta\n",
    ],
    ids=["chunked", "interim-and-trailer", "sized"],
)
async def test_every_cut_of_an_answer_into_reads_gives_the_same_lines(answer):
    """The parser against each place one read can end (two reads), and one byte per read."""
    cuts = [[answer[:i], answer[i:]] for i in range(1, len(answer))] + [[bytes([b]) for b in answer]]
    for reads in cuts:
        stream = LineStream(None)
        for data in reads:
            stream.data_received(data)
        await stream.head()
        assert stream.status == 200
        got = []
        while (lines := await stream.lines()) is not None:
            got += lines
        assert got == [b"alpha", b"beta"], reads


async def test_localkube_429_and_500_answers_are_reported_and_retried_as_before(kube, hook):
    name = _running_pod(kube, "faulty")
    kube.logs.write("default", name, "pytorch", "line\n")
    transport = await hook.transport()
    path = f"/api/v1/namespaces/default/pods/{name}/log"
    kube.faults.throttle(path=f"{name}/log", retry_after=7)
    with pytest.raises(KubeApiError) as caught:
        await transport.follow(path, query=[("container", "pytorch"), ("follow", "true")])
    assert caught.value.status == 429 and caught.value.retry_after == 7
    assert str(caught.value.request) == f"get pods/log default/{name}"
    # Through the hook, a 500 is retried and the follow goes on.
    kube.faults.fail(500, path=f"{name}/log")
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
async def test_through_a_proxy_the_follow_goes_through_the_session(how, monkeypatch):
    """``HTTP_PROXY`` (the session trusts the environment) or ``proxy-url``; the scripted server proxies."""
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with scripted() as (script, _):
        proxy = f"http://127.0.0.1:{script.port}"
        if how == "environment":
            monkeypatch.setenv("HTTP_PROXY", proxy)
        transport = KubeTransport(
            ClusterConfig(host="http://kube.invalid", proxy=proxy if how != "environment" else None)
        )
        script.push(HEAD, chunk(b"via\nthe proxy\n"), b"0\r\n\r\n")
        stream = await transport.follow("/api/v1/namespaces/ns/pods/p/log")
        assert not isinstance(stream, LineStream)
        assert await stream.lines() == [b"via", b"the proxy"]
        assert await stream.lines() is None
        stream.close()
        await transport.close()
    assert script.request.startswith(b"GET http://kube.invalid/api/v1/namespaces/ns/pods/p/log HTTP/1.1")

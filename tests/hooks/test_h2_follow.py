"""Log follows over HTTP/2 (hooks.multiplex) against localkube behind its HTTP/2 front (localkube.h2front):
the follows share a connection, each a stream; the server's stream limit, GOAWAY, a reset stream, a lost
connection, a reader that falls behind, and a server that does not speak HTTP/2."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from localkube.cluster import LocalKube
from localkube.gates import gate, open_gate
from localkube.h2front import H2Front
from localkube.resources import PODS
from localkube.runtime.script import ANNOTATION, register_script, unregister_script

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.kubeconfig import static_config
from airflow_provider_training.hooks.multiplex import STREAM_WINDOW, H2Stream
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.hooks.transport import LINES_BUFFER, KubeTransport, LineStream

NS = "default"
WAIT = 30.0  # a bound on a wait for what must happen, never a measured time


async def until(condition: Callable[[], object]) -> None:
    """Yield to the loop (where the front, localkube and the client run) until ``condition`` holds."""

    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), WAIT)


async def start_pods(kube: LocalKube, gate_name: str, *names: str) -> None:
    """Running pods that said "<name> before" and say "<name> after" (then exit) when the gate opens."""
    script = {
        "default": {"duration": 0, "logs": ["{pod} before"], "gate": gate_name, "after_gate": ["{pod} after"]}
    }
    for name in names:
        kube.store.create(
            PODS,
            NS,
            {
                "metadata": {"name": name, "annotations": {ANNOTATION: json.dumps(script)}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            },
        )
    for _ in names:
        await asyncio.wait_for(asyncio.to_thread(gate(gate_name).wait_reached), WAIT)
    await until(lambda: all("before" in kube.logs.text(NS, name, "main") for name in names))


@contextlib.asynccontextmanager
async def finished_pod(kube: LocalKube, name: str, lines: list[str]) -> AsyncIterator[None]:
    """A pod that wrote ``lines`` (all of them, then exited), for the block."""
    register_script(name, {"default": {"duration": 0, "logs": lines}})
    try:
        kube.store.create(
            PODS,
            NS,
            {
                "metadata": {"name": name},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            },
        )
        await until(lambda: kube.logs.text(NS, name, "main").count("\n") == len(lines))
        yield
    finally:
        unregister_script(name)


def transport_for(front: H2Front) -> KubeTransport:
    assert front.kubeconfig is not None
    kubeconfig = yaml.safe_load(Path(front.kubeconfig).read_text())
    return KubeTransport(static_config(kubeconfig, None, str(Path(front.kubeconfig).parent)))


@contextlib.asynccontextmanager
async def own_front(
    kube: LocalKube, tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[H2Front, KubeTransport]]:
    """A front of the test's own (``options``: H2Front's) and a transport to it, for the block."""
    front = H2Front(kube.url, **options)
    await front.start()
    front.write_kubeconfig(tmp_path / "front.kubeconfig", kube.token)
    transport = transport_for(front)
    try:
        yield front, transport
    finally:
        await transport.close()
        await front.close()


@pytest.fixture
async def transport(h2_localkube: H2Front) -> AsyncIterator[KubeTransport]:
    transport = transport_for(h2_localkube)
    yield transport
    await transport.close()


async def follow(transport: KubeTransport, pod: str) -> H2Stream | LineStream:
    stream = await transport.follow(f"/api/v1/namespaces/{NS}/pods/{pod}/log", query=[("follow", "true")])
    assert isinstance(stream, H2Stream | LineStream)
    return stream


async def read_all(stream: H2Stream | LineStream) -> list[str]:
    lines: list[str] = []
    while (more := await stream.lines()) is not None:
        lines += [line.decode() for line in more]
    return lines


async def test_followed_pods_share_one_connection_each_a_stream(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    await start_pods(localkube_async, gate_name, "a", "b", "c")

    streams = [await follow(transport, name) for name in ("a", "b", "c")]
    firsts = [await stream.lines() for stream in streams]

    assert {type(stream) for stream in streams} == {H2Stream}
    assert (h2_localkube.connections_made, h2_localkube.open_streams) == (1, 3)
    assert firsts == [[b"a before"], [b"b before"], [b"c before"]]

    open_gate(gate_name)
    rests = [await read_all(stream) for stream in streams]

    assert rests == [["a after"], ["b after"], ["c after"]]  # then each stream's end
    await until(lambda: h2_localkube.connections == 0)  # the client closed it with its last stream


async def test_past_the_servers_stream_limit_a_second_connection_opens(
    localkube_async: LocalKube, tmp_path: Path, gate_name: str
) -> None:
    async with own_front(localkube_async, tmp_path, max_concurrent_streams=2) as (front, transport):
        await start_pods(localkube_async, gate_name, "a", "b", "c")
        streams = [await follow(transport, name) for name in ("a", "b", "c")]
        firsts = [await stream.lines() for stream in streams]

        assert (front.connections_made, front.open_streams) == (2, 3)
        assert firsts == [[b"a before"], [b"b before"], [b"c before"]]
        for stream in streams:
            stream.close()


async def test_an_error_answer_is_the_api_error_and_the_connection_goes_on(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    await start_pods(localkube_async, gate_name, "a")
    live = await follow(transport, "a")

    with pytest.raises(KubeApiError) as missing:
        await follow(transport, "no-such-pod")

    assert missing.value.status == 404 and "no-such-pod" in str(missing.value)
    assert await live.lines() == [b"a before"]
    assert h2_localkube.connections_made == 1
    live.close()


async def two_follows(
    kube: LocalKube, transport: KubeTransport, gate_name: str
) -> tuple[H2Stream | LineStream, H2Stream | LineStream]:
    """Pods "a" and "b" running (see :func:`start_pods`), each followed."""
    await start_pods(kube, gate_name, "a", "b")
    return await follow(transport, "a"), await follow(transport, "b")


async def broken_follows(
    kube: LocalKube, transport: KubeTransport, gate_name: str, breaking: Callable[[], object], error: type
) -> list[BaseException]:
    """Two follows that read their first line, then ``breaking()`` (awaited if it returns an awaitable):
    what each follow raised (of type ``error``) reading on."""
    streams = await two_follows(kube, transport, gate_name)
    for stream in streams:
        assert await stream.lines() is not None
    if inspect.isawaitable(outcome := breaking()):
        await outcome
    errors = []
    for stream in streams:
        with pytest.raises(error) as raised:
            await read_all(stream)
        errors.append(raised.value)
    return errors


async def test_a_goaway_ends_every_stream_as_a_lost_connection_and_the_next_follow_connects_again(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    errors = await broken_follows(
        localkube_async, transport, gate_name, h2_localkube.goaway, aiohttp.ServerDisconnectedError
    )
    again = await follow(transport, "a")

    assert all(is_transient(error) for error in errors), "a follow resumes after it"
    assert len({id(error) for error in errors}) == 2, "an error each: one shared would gather tracebacks"
    assert await again.lines() == [b"a before"]
    assert h2_localkube.connections_made == 2
    again.close()


async def test_a_stream_the_server_resets_fails_that_follow_only(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    a, b = await two_follows(localkube_async, transport, gate_name)
    assert await a.lines() == [b"a before"]
    assert await b.lines() == [b"b before"]

    h2_localkube.reset("/pods/a/")
    with pytest.raises(aiohttp.ClientPayloadError, match="reset"):
        await read_all(a)
    open_gate(gate_name)

    assert await read_all(b) == ["b after"]
    assert h2_localkube.connections_made == 1


async def test_a_lost_connection_fails_its_follows_transiently(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    errors = await broken_follows(
        localkube_async, transport, gate_name, h2_localkube.drop, aiohttp.ClientError
    )

    assert [is_transient(error) for error in errors] == [True, True]
    again = await follow(transport, "b")
    assert await again.lines() == [b"b before"]
    again.close()


async def test_closing_follows_resets_their_streams_and_the_last_closes_the_connection(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    a, b = await two_follows(localkube_async, transport, gate_name)
    await until(lambda: h2_localkube.open_streams == 2)

    a.close()
    await until(lambda: h2_localkube.open_streams == 1)
    assert h2_localkube.connections == 1
    b.close()
    await until(lambda: h2_localkube.connections == 0)


async def test_a_connection_whose_follows_gave_up_while_it_opened_closes_unused(
    h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    """Follows cancelled while their connection waits for the server's SETTINGS (held at a gate): when it
    settles nobody takes a stream of it, and it closes rather than stay open until the pool closes."""
    h2_localkube.hold = gate_name
    follows = [asyncio.ensure_future(follow(transport, pod)) for pod in ("a", "b")]
    await asyncio.wait_for(asyncio.to_thread(gate(gate_name).wait_reached), WAIT)
    for task in follows:
        task.cancel()
    outcomes = await asyncio.gather(*follows, return_exceptions=True)
    open_gate(gate_name)

    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)
    await until(lambda: h2_localkube.connections == 0)
    with pytest.raises(KubeApiError):  # the next follow opens a connection of its own
        await follow(transport, "no-such-pod")
    assert (h2_localkube.connections_made, h2_localkube.streams_opened) == (2, 1)


async def test_a_server_that_never_sends_its_settings_fails_the_follow_within_the_connect_timeout(
    localkube_async: LocalKube, tmp_path: Path, gate_name: str
) -> None:
    """The server takes the connection and never settles it (its SETTINGS held at a gate that stays shut):
    the follow fails as a connect timeout, a transient error the streamer retries, and the connection is
    closed, rather than waiting for ever."""
    async with own_front(localkube_async, tmp_path) as (front, _):
        assert front.kubeconfig is not None
        kubeconfig = yaml.safe_load(Path(front.kubeconfig).read_text())
        config = static_config(kubeconfig, None, str(Path(front.kubeconfig).parent))
        transport = KubeTransport(config, request_timeout=10.0)  # the connect timeout: 10 s, a bound
        front.hold = gate_name
        try:
            with pytest.raises(aiohttp.ConnectionTimeoutError) as failure:
                await asyncio.wait_for(follow(transport, "no-such-pod"), WAIT)
            assert gate(gate_name).arrived == ["h2 connection 1"], "the server took it and held its SETTINGS"
            assert is_transient(failure.value)
            await until(lambda: front.connections == 0)
        finally:
            open_gate(gate_name)
            await transport.close()


async def test_a_reader_that_falls_behind_holds_back_its_window_and_then_reads_everything(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport
) -> None:
    """A log of some 3 MB, more than the stream's buffer and window together: while nobody reads, the stream
    stops acknowledging (the server stops at the window); reading then takes every line, in order."""
    lines = [f"line {n:06d} " + "x" * 90 for n in range(30_000)]
    async with finished_pod(localkube_async, "big", lines):
        stream = await follow(transport, "big")
        assert isinstance(stream, H2Stream)
        await until(lambda: stream._paused)
        held = len(stream._body)

        assert stream._withheld > 0, "acknowledgements wait while the reader is behind"
        assert LINES_BUFFER < held <= LINES_BUFFER + STREAM_WINDOW

        assert await read_all(stream) == lines


async def test_through_the_hook_a_followed_log_is_an_http2_stream(
    localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    await start_pods(localkube_async, gate_name, "a")
    assert h2_localkube.kubeconfig is not None
    kubeconfig = yaml.safe_load(Path(h2_localkube.kubeconfig).read_text())
    hook = AsyncTrainingJobHook(None, connection_extras={"kube_config": kubeconfig})
    try:
        stream = await hook.open_log(NS, "a", "main", timestamps=False)
        first = await stream.lines()
        open_gate(gate_name)
        rest = await read_all(stream)  # type: ignore[arg-type]
    finally:
        await hook.close()

    assert isinstance(stream, H2Stream)
    assert (first, rest) == ([b"a before"], ["a after"])


async def test_a_server_that_does_not_choose_h2_gets_a_connection_per_follow(
    localkube_async: LocalKube, tmp_path: Path, gate_name: str
) -> None:
    async with own_front(localkube_async, tmp_path, alpn=("http/1.1",)) as (front, transport):
        await start_pods(localkube_async, gate_name, "a", "b")
        streams = [await follow(transport, name) for name in ("a", "b")]
        firsts = [await stream.lines() for stream in streams]
        pool = transport._pooled()

        assert {type(stream) for stream in streams} == {LineStream}
        assert pool.h2 is not None and pool.h2.refused
        assert firsts == [[b"a before"], [b"b before"]]
        assert front.connections_made == 3, "the ALPN probe, then a connection per follow"
        for stream in streams:
            stream.close()


async def test_a_log_read_whole_is_a_stream_of_the_follows_connection(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport, gate_name: str
) -> None:
    """When many jobs end together, their final log reads share the follows' connection: no handshake each."""
    await start_pods(localkube_async, gate_name, "a")
    live = await follow(transport, "a")
    path = f"/api/v1/namespaces/{NS}/pods/a/log"

    whole = await transport.read_bytes(path)
    with pytest.raises(KubeApiError) as missing:
        await transport.read_bytes(f"/api/v1/namespaces/{NS}/pods/no-such-pod/log")

    assert whole == b"a before\n"
    assert missing.value.status == 404
    assert (h2_localkube.connections_made, h2_localkube.streams_opened) == (1, 3)
    live.close()


async def test_a_large_log_read_whole_over_http2_is_complete(
    localkube_async: LocalKube, h2_localkube: H2Front, transport: KubeTransport
) -> None:
    """Some 3 MB: more than a stream's window and buffer, so the read acknowledges as it takes the body."""
    lines = [f"line {n:06d} " + "y" * 90 for n in range(30_000)]
    async with finished_pod(localkube_async, "whole", lines):
        whole = await transport.read_bytes(f"/api/v1/namespaces/{NS}/pods/whole/log")

        assert whole.decode().splitlines() == lines
        assert h2_localkube.streams_opened == 1


async def test_without_http2_a_log_read_whole_goes_through_the_session(
    localkube_async: LocalKube, tmp_path: Path, gate_name: str
) -> None:
    async with own_front(localkube_async, tmp_path, alpn=("http/1.1",)) as (front, transport):
        await start_pods(localkube_async, gate_name, "a")
        whole = await transport.read_bytes(f"/api/v1/namespaces/{NS}/pods/a/log")
        pool = transport._pooled()

        assert whole == b"a before\n"
        assert pool.h2 is not None and pool.h2.refused
        assert front.streams_opened == 0


def test_http2_follows_and_reads_run_on_uvloop_as_the_api_server_runs_them(tmp_path: Path) -> None:
    """The Training tab follows and reads logs in the api-server, whose loop is uvloop's (its TLS transport is
    uvloop's own, not asyncio's)."""
    import uvloop

    async def follow_and_read() -> tuple[type, list[bytes] | None, bytes]:
        async with LocalKube() as kube, own_front(kube, tmp_path) as (_front, transport):
            name = f"uvloop-{uuid.uuid4().hex[:6]}"
            await start_pods(kube, name, "a")
            stream = await follow(transport, "a")
            first = await stream.lines()
            whole = await transport.read_bytes(f"/api/v1/namespaces/{NS}/pods/a/log")
            stream.close()
            open_gate(name)
            return type(stream), first, whole

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        kind, first, whole = runner.run(follow_and_read())

    assert kind is H2Stream
    assert (first, whole) == ([b"a before"], b"a before\n")


IMPORT_PROBE = r"""
import asyncio, importlib.abc, sys, threading, tempfile
from pathlib import Path

loaded_in = []

class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "airflow_provider_training.hooks.multiplex":
            loaded_in.append(threading.current_thread() is threading.main_thread())
        return None

sys.meta_path.insert(0, Probe())
from localkube.cluster import LocalKube
from localkube.h2front import H2Front
import yaml
from airflow_provider_training.hooks.kubeconfig import static_config
from airflow_provider_training.hooks.transport import KubeTransport

async def main():
    async with LocalKube() as kube:
        front = H2Front(kube.url)
        await front.start()
        path = front.write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig", kube.token)
        transport = KubeTransport(static_config(yaml.safe_load(path.read_text()), None, str(path.parent)))
        try:
            await transport.read_bytes("/api/v1/namespaces")
        finally:
            await transport.close()
            await front.close()

asyncio.run(main())
print("on the loop's thread" if any(loaded_in) else f"in another thread ({len(loaded_in)})")
"""


def test_the_first_http2_stream_imports_its_module_off_the_loop() -> None:
    """A triggerer's loop must not stall on an import (h2 takes some 100 ms cold): the module is imported in
    a thread (``offloop.import_off_loop``) before anything of it runs on the loop."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "in another thread (1)"

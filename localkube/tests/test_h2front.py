"""The HTTP/2 front (localkube.h2front) driven by a real HTTP/2 client: the `h2` library's client side over
asyncio's TLS, in this file (not the provider's client), against a real localkube behind it."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import kubernetes_asyncio
import pytest
from h2.errors import ErrorCodes
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import GoAwayFrame, HeadersFrame
from localkube.cluster import LocalKube
from localkube.gates import gate, open_gate
from localkube.h2front import H2Front
from localkube.kubeletapi import self_signed
from localkube.resources import CONFIGMAPS, PODS
from localkube.runtime.script import ANNOTATION

NS = "default"
WAIT = 30.0  # a bound on a wait for what must happen, never a measured time


def tls(*alpn: str, certificate: bytes | None = None) -> ssl.SSLContext:
    """A client TLS context offering `alpn` (none: no ALPN) that verifies the front with its `certificate`,
    or takes any certificate without one."""
    context = ssl.create_default_context(cadata=certificate.decode() if certificate else None)
    if certificate is None:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


@dataclass
class Reply:
    """What came back on one stream."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: int | None = None  # the RST_STREAM error code
    acked: int = 0  # bytes of the body acknowledged by hand (``Client(ack=False)``)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Client:
    """A minimal HTTP/2 client: one TLS connection, streams by id, every frame's effect recorded.
    With ``ack=False`` received DATA is not acknowledged (no WINDOW_UPDATE) until :meth:`ack`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, ack: bool) -> None:
        self.reader, self.writer, self.auto_ack = reader, writer, ack
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.replies: dict[int, Reply] = {}
        self.frames = FrameBuffer(server=False)
        self.frames.max_frame_size = self.conn.max_inbound_frame_size
        self.goaway: GoAwayFrame | None = None
        self.closed = False
        self.error: h2.exceptions.ProtocolError | None = None
        self.changed = asyncio.Event()
        self.settings_acked = asyncio.Event()
        self.pings: list[h2.events.PingAckReceived] = []
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls, url: str, *, window: int | None = None, ack: bool = True, certificate: bytes | None = None
    ) -> Client:
        parts = urlsplit(url)
        context = tls("h2", certificate=certificate)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=context)
        assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        client = cls(reader, writer, ack=ack)
        if window is not None:
            client.conn.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
            )
        client.conn.initiate_connection()
        client.flush()
        client._task = asyncio.get_running_loop().create_task(client._read())
        await asyncio.wait_for(client.settings_acked.wait(), WAIT)  # our SETTINGS apply from here
        return client

    def flush(self) -> None:
        if not self.writer.is_closing():
            self.writer.write(self.conn.data_to_send())

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                self.frames.add_data(data)
                for frame in self.frames:
                    if isinstance(frame, GoAwayFrame):
                        # h2 takes GOAWAY for the connection's end and refuses later frames; the streams up
                        # to last_stream_id go on (RFC 9113 6.8), so it is kept from h2 and recorded here.
                        self.goaway = frame
                        continue
                    for event in self.conn.receive_data(frame.serialize()):
                        self._apply(event)
                self.flush()
                self.changed.set()
        except (ConnectionError, ssl.SSLError):
            pass
        except h2.exceptions.ProtocolError as exc:  # the front broke HTTP/2 (a flow-control window, ...)
            self.error = exc
        finally:
            self.closed = True
            self.changed.set()
            for reply in self.replies.values():
                reply.changed.set()

    def _apply(self, event: h2.events.Event) -> None:
        reply = self.replies.get(getattr(event, "stream_id", None) or 0)
        if isinstance(event, h2.events.SettingsAcknowledged):
            self.settings_acked.set()
        elif isinstance(event, h2.events.PingAckReceived):
            self.pings.append(event)
        elif reply is None:
            return
        elif isinstance(event, h2.events.ResponseReceived):
            headers = {k.decode(): v.decode() for k, v in event.headers or []}
            reply.status, reply.headers = int(headers.pop(":status")), headers
        elif isinstance(event, h2.events.DataReceived):
            reply.body += event.data or b""
            if self.auto_ack:
                self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id or 0)
        elif isinstance(event, h2.events.StreamEnded):
            reply.ended = True
        elif isinstance(event, h2.events.StreamReset):
            reply.reset = event.error_code
        if reply is not None:
            reply.changed.set()

    def get(self, path: str, token: str) -> int:
        """Open a stream: GET `path` with the bearer token; returns its id."""
        return self.request("GET", path, token)

    def request(self, method: str, path: str, token: str, body: dict | None = None) -> int:
        """Open a stream with a request (a JSON body if given, in one DATA frame); returns its id."""
        stream_id = self.conn.get_next_available_stream_id()
        headers = [
            (":method", method),
            (":scheme", "https"),
            (":authority", "localkube"),
            (":path", path),
            ("authorization", f"Bearer {token}"),
            ("accept", "application/json"),
            ("user-agent", "test-h2front"),
        ]
        if body is not None:
            headers.append(("content-type", "application/json"))
        self.conn.send_headers(stream_id, headers, end_stream=body is None)
        if body is not None:
            self.conn.send_data(stream_id, json.dumps(body).encode(), end_stream=True)
        self.replies[stream_id] = Reply()
        self.flush()
        return stream_id

    def ack(self, stream_id: int, size: int) -> None:
        self.conn.acknowledge_received_data(size, stream_id)
        self.flush()

    async def ping(self) -> None:
        """A PING and its ACK: everything the front wrote before the ACK has been read."""
        seen = len(self.pings)
        self.conn.ping(b"12345678")
        self.flush()
        await self.until(lambda: len(self.pings) > seen)

    async def until(self, condition: Callable[[], object], stream_id: int | None = None) -> None:
        """Wait for frames until `condition` holds (what the front sends is what changes it)."""

        async def wait() -> None:
            while not condition():
                event = self.replies[stream_id].changed if stream_id else self.changed
                event.clear()
                if condition():
                    return
                if self.closed and not condition():
                    raise AssertionError(f"the connection closed before the condition held: {self.error!r}")
                await event.wait()

        await asyncio.wait_for(wait(), WAIT)

    async def response(self, stream_id: int) -> Reply:
        """The stream's whole answer."""
        reply = self.replies[stream_id]
        await self.until(lambda: reply.ended or reply.reset is not None, stream_id)
        return reply

    async def close(self) -> None:
        self.writer.close()
        if self._task is not None:
            await self._task


@pytest.fixture(autouse=True)
def no_error_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Nothing the front does (closing included: this runs after the other fixtures' teardown) logs an
    error, such as asyncio's for a connection handler that failed."""
    yield
    records = caplog.get_records("call") + caplog.get_records("teardown")
    assert not [r.getMessage() for r in records if r.levelno >= logging.ERROR]


@pytest.fixture
async def client(h2_localkube: H2Front) -> AsyncIterator[Client]:
    opened = await Client.connect(h2_localkube.url, certificate=h2_localkube.certificate)  # TLS verified
    yield opened
    await opened.close()


async def until(condition: Callable[[], object]) -> None:
    """Wait (yielding to the loop, where the front and localkube run) until `condition` holds: for state
    changes that no frame announces, such as the upstream side closing."""

    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), WAIT)


async def following(client: Client, kube: LocalKube, gate_name: str) -> int:
    """A running pod "p" that has said "before" and says "after" (then exits) when the gate opens, and a
    stream following its log that has read "before"; the stream's id."""
    script = {"default": {"duration": 0, "logs": ["before"], "gate": gate_name, "after_gate": ["after"]}}
    kube.store.create(
        PODS,
        NS,
        {
            "metadata": {"name": "p", "annotations": {ANNOTATION: json.dumps(script)}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    await asyncio.wait_for(asyncio.to_thread(gate(gate_name).wait_reached), WAIT)
    stream = client.get(f"/api/v1/namespaces/{NS}/pods/p/log?follow=true", kube.token)
    await client.until(lambda: client.replies[stream].body == b"before\n", stream)
    return stream


def upstream_connections(kube: LocalKube) -> int:
    """The HTTP connections localkube's server has open (the front's upstream requests)."""
    assert kube._runner is not None and kube._runner.server is not None
    return len(kube._runner.server.connections)


async def test_get_returns_localkubes_json(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front
) -> None:
    reply = await client.response(client.get("/api/v1/namespaces", localkube_async.token))
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert "transfer-encoding" not in reply.headers and "connection" not in reply.headers
    names = {item["metadata"]["name"] for item in json.loads(reply.body)["items"]}
    assert {"default", "kube-system"} <= names
    assert (h2_localkube.connections, h2_localkube.connections_made, h2_localkube.streams_opened) == (1, 1, 1)
    await until(lambda: h2_localkube.open_streams == 0)


async def test_a_followed_log_streams_as_the_pod_writes(
    client: Client, localkube_async: LocalKube, gate_name: str
) -> None:
    stream = await following(client, localkube_async, gate_name)
    reply = client.replies[stream]
    assert reply.status == 200 and not reply.ended
    open_gate(gate_name)
    await client.response(stream)
    assert reply.body == b"before\nafter\n" and reply.reset is None


async def test_a_watch_streams_its_events(client: Client, localkube_async: LocalKube) -> None:
    stream = client.get(f"/api/v1/namespaces/{NS}/configmaps?watch=true", localkube_async.token)
    reply = client.replies[stream]
    await client.until(lambda: reply.status == 200, stream)  # the watch is registered upstream
    localkube_async.store.create(CONFIGMAPS, NS, {"metadata": {"name": "seen"}})
    await client.until(lambda: reply.body.endswith(b"\n"), stream)
    event = json.loads(reply.body)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "seen")
    assert not reply.ended


async def test_a_request_body_and_its_content_type_go_upstream(
    client: Client, localkube_async: LocalKube
) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "posted"}, "data": {"k": "v"}}
    reply = await client.response(client.request("POST", f"/api/v1/namespaces/{NS}/configmaps", "", body))
    assert reply.status == 401  # the authorization header went upstream too
    token = localkube_async.token
    reply = await client.response(client.request("POST", f"/api/v1/namespaces/{NS}/configmaps", token, body))
    assert reply.status == 201, reply.body
    assert localkube_async.store.get(CONFIGMAPS, NS, "posted")["data"] == {"k": "v"}


async def test_two_streams_share_one_connection(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    follow = await following(client, localkube_async, gate_name)
    listed = await client.response(client.get("/api/v1/namespaces", localkube_async.token))
    assert listed.status == 200 and json.loads(listed.body)["kind"] == "NamespaceList"
    assert not client.replies[follow].ended  # answered while the follow stays open on the same connection
    assert (h2_localkube.connections_made, h2_localkube.streams_opened, h2_localkube.open_streams) == (
        1,
        2,
        1,
    )
    open_gate(gate_name)
    assert (await client.response(follow)).body == b"before\nafter\n"


async def test_max_concurrent_streams_is_announced(localkube_async: LocalKube, h2_localkube: H2Front) -> None:
    client = await Client.connect(h2_localkube.url)
    assert client.conn.remote_settings.max_concurrent_streams == 100  # the default
    await client.close()
    front = H2Front(localkube_async.url, max_concurrent_streams=3)
    await front.start()
    try:
        client = await Client.connect(front.url)
        assert client.conn.remote_settings.max_concurrent_streams == 3
        await client.close()
    finally:
        await front.close()


async def test_a_stream_beyond_the_limit_ends_the_connection(
    localkube_async: LocalKube, gate_name: str
) -> None:
    """h2 answers a stream past SETTINGS_MAX_CONCURRENT_STREAMS with GOAWAY(PROTOCOL_ERROR) (Go resets just
    the stream): a client under test must queue. The test's client writes the HEADERS frame itself, since
    h2's client refuses to."""
    front = H2Front(localkube_async.url, max_concurrent_streams=1)
    await front.start()
    try:
        client = await Client.connect(front.url)
        follow = await following(client, localkube_async, gate_name)
        frame = HeadersFrame(follow + 2, flags=("END_HEADERS", "END_STREAM"))
        frame.data = client.conn.encoder.encode(
            [(":method", "GET"), (":scheme", "https"), (":authority", "localkube"), (":path", "/version")]
        )
        client.writer.write(frame.serialize())
        await client.until(lambda: client.goaway is not None and client.closed)
        assert client.goaway is not None
        assert (client.goaway.error_code, client.goaway.last_stream_id) == (ErrorCodes.PROTOCOL_ERROR, follow)
        await client.close()
    finally:
        await front.close()


async def test_data_stays_within_the_clients_window(
    localkube_async: LocalKube, h2_localkube: H2Front
) -> None:
    """A stream window of 100 bytes: the front sends 100 bytes, then nothing until the client's
    WINDOW_UPDATE (h2's client would also raise a FlowControlError at the first byte beyond it)."""
    client = await Client.connect(h2_localkube.url, window=100, ack=False)
    stream = client.get("/api/v1/namespaces", localkube_async.token)
    reply = client.replies[stream]
    await client.until(lambda: len(reply.body) == 100, stream)
    await client.ping()  # the front has written all it would: what it had sent is here
    assert len(reply.body) == 100 and not reply.ended
    while not reply.ended:
        before = len(reply.body)
        client.ack(stream, 100)  # the whole window again
        await client.until(lambda b=before: len(reply.body) > b or reply.ended, stream)
        assert len(reply.body) - before <= 100
    assert json.loads(reply.body)["kind"] == "NamespaceList"
    await client.close()


async def test_the_connections_window_bounds_all_its_streams(
    localkube_async: LocalKube, h2_localkube: H2Front
) -> None:
    """Streams with room of their own (1 MiB) share the connection's 65,535 bytes: two 40 KB answers stop
    at 65,535 bytes together until the client acknowledges."""
    localkube_async.store.create(CONFIGMAPS, NS, {"metadata": {"name": "big"}, "data": {"k": "x" * 40_000}})
    client = await Client.connect(h2_localkube.url, window=1 << 20, ack=False)
    streams = [client.get(f"/api/v1/namespaces/{NS}/configmaps/big", localkube_async.token) for _ in "ab"]
    replies = [client.replies[stream] for stream in streams]

    def received() -> int:
        return sum(len(reply.body) for reply in replies)

    await client.until(lambda: received() == 65_535)
    await client.ping()
    assert received() == 65_535 and not all(reply.ended for reply in replies)
    while not all(reply.ended for reply in replies):
        before = received()
        for stream, reply in zip(streams, replies, strict=True):
            client.ack(stream, len(reply.body) - reply.acked)
            reply.acked = len(reply.body)
        await client.until(lambda b=before: received() > b or all(reply.ended for reply in replies))
    assert [json.loads(reply.body)["data"]["k"] for reply in replies] == ["x" * 40_000] * 2
    await client.close()


async def test_goaway_lets_open_streams_finish_then_closes(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    follow = await following(client, localkube_async, gate_name)
    await h2_localkube.goaway()
    await client.until(lambda: client.goaway is not None)
    assert client.goaway is not None
    assert (client.goaway.error_code, client.goaway.last_stream_id) == (0, follow)
    assert not client.closed and h2_localkube.connections == 1  # the open stream goes on
    open_gate(gate_name)
    assert (await client.response(follow)).body == b"before\nafter\n"
    await client.until(lambda: client.closed)
    await until(lambda: h2_localkube.connections == 0)
    # the front still accepts connections (a kube-apiserver's --goaway-chance)
    again = await Client.connect(h2_localkube.url)
    assert (await again.response(again.get("/api/v1/namespaces", localkube_async.token))).status == 200
    await again.close()


async def test_reset_cancels_matching_streams_and_their_upstream_requests(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    follow = await following(client, localkube_async, gate_name)
    assert upstream_connections(localkube_async) == 1
    h2_localkube.reset("/namespaces/default/pods/other")  # matches nothing
    h2_localkube.reset("/pods/p/log")
    reply = await client.response(follow)
    assert reply.reset == ErrorCodes.CANCEL and not reply.ended
    await until(lambda: h2_localkube.open_streams == 0)
    await until(lambda: upstream_connections(localkube_async) == 0)  # the follow's request was closed
    assert not client.closed  # the connection goes on
    assert (await client.response(client.get("/api/v1/namespaces", localkube_async.token))).status == 200


async def test_drop_closes_connections_without_goaway(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    follow = await following(client, localkube_async, gate_name)
    h2_localkube.drop()
    await client.until(lambda: client.closed)
    assert client.goaway is None and not client.replies[follow].ended
    await until(lambda: h2_localkube.connections == 0 and h2_localkube.open_streams == 0)
    await until(lambda: upstream_connections(localkube_async) == 0)


async def test_a_client_closing_its_connection_ends_the_upstream_requests(
    client: Client, localkube_async: LocalKube, h2_localkube: H2Front, gate_name: str
) -> None:
    await following(client, localkube_async, gate_name)
    assert upstream_connections(localkube_async) == 1
    await client.close()
    await until(lambda: h2_localkube.connections == 0 and h2_localkube.open_streams == 0)
    await until(lambda: upstream_connections(localkube_async) == 0)


async def test_a_hold_keeps_the_fronts_settings_until_its_gate_opens(
    h2_localkube: H2Front, gate_name: str
) -> None:
    h2_localkube.hold = gate_name
    parts = urlsplit(h2_localkube.url)
    _, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=tls("h2"))
    await asyncio.wait_for(asyncio.to_thread(gate(gate_name).wait_reached), WAIT)
    writer.close()  # a client that gives up while held: the front lets the connection go
    await until(lambda: h2_localkube.connections == 0)

    connecting = asyncio.ensure_future(Client.connect(h2_localkube.url))
    await until(lambda: len(gate(gate_name).arrived) == 2)
    assert not connecting.done(), "no SETTINGS of the front's yet: ours are not acknowledged"
    open_gate(gate_name)
    client = await connecting
    assert client.conn.remote_settings.max_concurrent_streams == 100
    await client.close()


async def test_http11_by_alpn_is_a_byte_pipe(localkube_async: LocalKube) -> None:
    front = H2Front(localkube_async.url, alpn=("http/1.1",))
    await front.start()
    try:
        context = tls("h2", "http/1.1")  # offers h2; the front only has http/1.1
        headers = {"Authorization": f"Bearer {localkube_async.token}"}
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # two requests on the kept-alive piped connection
                async with session.get(f"{front.url}/api/v1/namespaces", headers=headers, ssl=context) as got:
                    assert got.status == 200
                    assert (await got.json())["kind"] == "NamespaceList"
        assert (front.connections_made, front.streams_opened) == (1, 0)
    finally:
        await front.close()


async def test_a_client_without_alpn_gets_the_pipe(localkube_async: LocalKube, h2_localkube: H2Front) -> None:
    parts = urlsplit(h2_localkube.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=tls())
    writer.write(
        f"GET /api/v1/namespaces HTTP/1.1\r\nHost: localkube\r\nConnection: close\r\n"
        f"Authorization: Bearer {localkube_async.token}\r\n\r\n".encode()
    )
    answer = await asyncio.wait_for(reader.read(), WAIT)  # to the end: the upstream closes after answering
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b'"kind":"NamespaceList"' in body.replace(b" ", b"")
    writer.close()
    assert h2_localkube.streams_opened == 0


async def test_the_kubeconfig_verifies_the_front(h2_localkube: H2Front) -> None:
    """The real async client with the fixture's kubeconfig: TLS verified against the front's certificate
    (aiohttp offers no ALPN: the HTTP/1.1 pipe)."""
    assert h2_localkube.kubeconfig is not None
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(h2_localkube.kubeconfig), client_configuration=configuration
    )
    assert configuration.verify_ssl and configuration.ssl_ca_cert
    async with kubernetes_asyncio.client.ApiClient(configuration) as api:
        listed = await kubernetes_asyncio.client.CoreV1Api(api).list_namespace()
    assert "default" in {item.metadata.name for item in listed.items}
    assert h2_localkube.connections_made == 1


async def test_another_certificate_is_refused(h2_localkube: H2Front) -> None:
    """The verified clients above verify: a certificate not the front's fails the handshake."""
    other, _ = self_signed("127.0.0.1", "not-the-front")
    with pytest.raises(ssl.SSLCertVerificationError):
        await Client.connect(h2_localkube.url, certificate=other)


async def test_the_command_line_prints_its_port(localkube_async: LocalKube) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "localkube.h2front",
        "--upstream",
        localkube_async.url,
        "--max-streams",
        "7",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        port = int(await asyncio.wait_for(child.stdout.readline(), WAIT))
        client = await Client.connect(f"https://127.0.0.1:{port}")
        assert client.conn.remote_settings.max_concurrent_streams == 7
        assert (await client.response(client.get("/api/v1/namespaces", localkube_async.token))).status == 200
        await client.close()
    finally:
        child.terminate()
        assert await child.wait() == 0


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="upstream"):
        H2Front("https://127.0.0.1:1")
    with pytest.raises(ValueError, match="max_concurrent_streams"):
        H2Front("http://127.0.0.1:1", max_concurrent_streams=0)

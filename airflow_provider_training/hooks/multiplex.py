"""Log follows over HTTP/2: many followed pods share one TLS connection to the API server, as client-go's do.

Each follow over TLS on its own connection held OpenSSL's state of that connection, about 27 KB, for as long
as the pod ran (``benchmarks/follow_rss.py``): at 1,000 jobs with two followed pods each, 54 MB of it. Over
HTTP/2 a follow is a stream (:class:`H2Stream`) of a shared connection (:class:`H2Link`), and holds what its
reader needs plus the ``h2`` library's state of one stream. The framing, HPACK and flow control are ``h2``'s
(the python-hyper project's sans-I/O HTTP/2, which httpx and hypercorn use); this module only moves bytes.

- A connection carries as many streams as the server allows (``SETTINGS_MAX_CONCURRENT_STREAMS``: the
  kube-apiserver's ``--http2-max-streams-per-connection``); past that a second one opens.
- Flow control: each stream may receive :data:`STREAM_WINDOW` bytes ahead of its reader, and they are
  acknowledged as they arrive while less than :data:`~.transport.LINES_BUFFER` bytes wait to be handed on;
  past that the stream's acknowledgements wait (its sender stops once its window is spent), and the other
  streams of the connection go on (its connection window is :data:`CONNECTION_WINDOW`, as Go's client).
- A ``GOAWAY`` (a kube-apiserver's ``--goaway-chance``, its shutdown) ends every stream of the connection
  with ``ServerDisconnectedError``, retried as a lost connection is: each follow resumes where it was, and
  new follows open a new connection. A lost connection fails its streams as a lost HTTP/1.1 connection
  fails its answer.
- A server that does not choose ``h2`` by ALPN gets HTTP/1.1 follows, one connection each, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

import aiohttp
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from multidict import CIMultiDict

from airflow_provider_training.hooks.transport import _ENDED, _HEAD, _UNTIL_CLOSE, LINES_BUFFER, PushedLines

STREAM_WINDOW = LINES_BUFFER  # what a stream may receive ahead of its reader
CONNECTION_WINDOW = 2**30  # Go's client (transportDefaultConnFlow): a slow stream does not stall the others


class H2Stream(PushedLines):
    """A GET on a shared HTTP/2 connection: its answer's head, then its body's lines (see
    :class:`~.transport.PushedLines`). Closing it before its end resets the stream (``CANCEL``)."""

    __slots__ = ("_id", "_link", "_withheld")

    def __init__(self, link: H2Link, stream_id: int, read_timeout: float | None) -> None:
        super().__init__(read_timeout)
        self._link: H2Link | None = link
        self._id = stream_id
        self._withheld = 0  # received bytes not yet acknowledged (the reader is behind)
        self._start_timer()

    def _got_response(self, fields: list[tuple[bytes, bytes]]) -> None:
        headers: CIMultiDict[str] = CIMultiDict()
        status = 0
        for name, value in fields:
            if name == b":status":
                status = int(value)
            elif not name.startswith(b":"):
                headers.add(name.decode("latin-1"), value.decode("latin-1"))
        if 100 <= status < 200:
            return  # an interim answer: the real head follows
        self._got_head(status, headers)
        self._state = _UNTIL_CLOSE
        self._wake()

    def _got_data(self, data: bytes, flow_controlled: int) -> None:
        self._touch()
        self._body += data
        if self._paused or len(self._body) > LINES_BUFFER:
            self._withheld += flow_controlled
        elif self._link is not None:
            self._link.acknowledge(self._id, flow_controlled)
        self._after_data()

    def _pause(self) -> bool:
        return self._link is not None  # acknowledgements wait (see _got_data) until _resume

    def _resume(self) -> None:
        withheld, self._withheld = self._withheld, 0
        if withheld and self._link is not None:
            self._link.acknowledge(self._id, withheld)

    def _got_end(self) -> None:
        self._leave()
        self._ended()

    def _shut(self) -> None:
        if self._link is not None and self._state != _ENDED:
            self._link.cancel(self._id)
        self._leave()

    def _leave(self) -> H2Link | None:
        link, self._link = self._link, None
        if link is not None:
            link.forget(self._id)
        return link


class H2Link(asyncio.Protocol):
    """One HTTP/2 connection over TLS, carrying the streams of many follows."""

    __slots__ = ("_conn", "_settled", "_transport", "closing", "limit", "streams")

    def __init__(self) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._conn = h2.connection.H2Connection(config=config)
        self._conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            },
        )
        self._transport: asyncio.Transport | None = None
        self._settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.streams: dict[int, H2Stream] = {}
        self.limit = 0  # the server's stream limit, once its SETTINGS came
        self.closing = False  # a GOAWAY came, or the connection is gone: no new streams

    @property
    def protocol(self) -> str | None:
        """The protocol the server chose by ALPN."""
        if self._transport is None:
            return None
        sslobj = cast(ssl.SSLObject | None, self._transport.get_extra_info("ssl_object"))
        return sslobj.selected_alpn_protocol() if sslobj is not None else None

    def has_room(self) -> bool:
        return not self.closing and self._transport is not None and len(self.streams) < self.limit

    async def settled(self) -> None:
        """Wait for the server's SETTINGS (its stream limit)."""
        await asyncio.shield(self._settled)

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self.protocol != "h2":
            return  # the opener sees it and closes
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(CONNECTION_WINDOW - self._conn.inbound_flow_control_window)
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._conn.receive_data(data)
        except h2.exceptions.ProtocolError as err:
            self._flush()  # h2's GOAWAY for the server
            self._lost(aiohttp.ClientPayloadError(f"HTTP/2 protocol error: {err!r}"))
            if self._transport is not None:
                self._transport.close()
            return
        for event in events:
            self._dispatch(event)
        self._flush()

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream._got_data(event.data or b"", event.flow_controlled_length or 0)
            elif event.flow_controlled_length:  # a stream closed meanwhile: its bytes still count
                self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id or 0)
        elif isinstance(event, h2.events.ResponseReceived):
            if (stream := self.streams.get(event.stream_id or 0)) is not None:
                stream._got_response(cast(list[tuple[bytes, bytes]], event.headers or []))
        elif isinstance(event, h2.events.StreamEnded):
            if (stream := self.streams.get(event.stream_id or 0)) is not None:
                stream._got_end()
        elif isinstance(event, h2.events.StreamReset):
            if (stream := self.streams.get(event.stream_id or 0)) is not None:
                code = event.error_code
                stream._leave()
                stream._fail(aiohttp.ClientPayloadError(f"The server reset the stream: {code!r}"))
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.limit = self._conn.remote_settings.max_concurrent_streams
            if not self._settled.done():
                self._settled.set_result(None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway()

    def _goaway(self) -> None:
        """The server takes no new streams. Go would finish those it took, but ``h2`` closes its state at a
        GOAWAY and refuses their later frames: every stream ends as on a lost connection (its follow
        resumes where it was, on a new connection), and this one closes."""
        self._lost(None, went_away=True)
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._lost(exc)

    def _lost(self, exc: BaseException | None, *, went_away: bool = False) -> None:
        """The connection ended: its streams fail as an HTTP/1.1 answer does on a lost connection."""
        self.closing = True
        if not self._settled.done():
            self._settled.set_exception(aiohttp.ServerDisconnectedError())
            self._settled.exception()  # retrieved: nobody may be waiting
        cause = f": {exc!r}" if exc is not None else ""
        for stream in list(self.streams.values()):
            stream._leave()
            if went_away:  # one error each: a shared one would gather every raiser's traceback
                stream._fail(aiohttp.ServerDisconnectedError("The server went away (HTTP/2 GOAWAY)"))
            elif stream._state == _HEAD:
                stream._fail(aiohttp.ServerDisconnectedError())
            else:
                stream._fail(aiohttp.ClientPayloadError(f"Response payload is not completed{cause}"))

    # -- the streams' side ----------------------------------------------------------------------------------

    def open_stream(self, headers: list[tuple[str, str]], read_timeout: float | None) -> H2Stream:
        """A new stream, its GET (``headers``, pseudo-headers first) sent; its answer comes to the stream."""
        stream_id = self._conn.get_next_available_stream_id()
        stream = self.streams[stream_id] = H2Stream(self, stream_id, read_timeout)
        self._conn.send_headers(stream_id, headers, end_stream=True)
        self._flush()
        return stream

    def acknowledge(self, stream_id: int, size: int) -> None:
        if self._transport is not None:
            self._conn.acknowledge_received_data(size, stream_id)
            self._flush()

    def cancel(self, stream_id: int) -> None:
        if self._transport is not None:
            with contextlib.suppress(h2.exceptions.StreamClosedError):  # the server ended it meanwhile
                self._conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self._flush()

    def forget(self, stream_id: int) -> None:
        self.streams.pop(stream_id, None)
        self.close_if_idle()

    def close_if_idle(self) -> None:
        """Say GOAWAY and close, if no stream is open."""
        if not self.streams and self._transport is not None:
            if not self.closing:
                self.closing = True
                self._conn.close_connection()
                self._flush()
            self._transport.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _flush(self) -> None:
        if self._transport is not None and (out := self._conn.data_to_send()):
            self._transport.write(out)


class H2Links:
    """The HTTP/2 connections of one configuration on one loop: a follow takes a stream of the first with
    room; one connection opens at a time, for every follow waiting for room. A connection closes when its
    last stream ends, or unused when the follows that waited for it gave up (cancelled, timed out)."""

    def __init__(self) -> None:
        self.links: list[H2Link] = []
        self.refused = False  # the server chose HTTP/1.1: follows go on their own connections
        self._opening: asyncio.Task[None] | None = None
        self._waiting = 0  # follows waiting for the opening (woken ones too, until they take their stream)

    async def open(
        self,
        connect: Callable[[], Awaitable[H2Link]],
        headers: list[tuple[str, str]],
        read_timeout: float | None,
    ) -> H2Stream | None:
        """A stream on a shared connection (connected with ``connect()`` if none has room), its GET sent;
        ``None`` if the server does not speak HTTP/2. ``connect()`` returns a connection whose SETTINGS came
        when the server chose ``h2``, and bounds that wait."""
        while not self.refused:
            self.links = [link for link in self.links if not link.closing]
            link = next((link for link in self.links if link.has_room()), None)
            if link is not None:
                return link.open_stream(headers, read_timeout)  # no await since has_room
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._connect(connect))
            self._waiting += 1
            try:
                await asyncio.shield(self._opening)
            except BaseException:
                self._waiting -= 1
                self._close_unused()
                raise
            self._waiting -= 1  # and on to its stream, with no await between
        return None

    async def _connect(self, connect: Callable[[], Awaitable[H2Link]]) -> None:
        try:
            link = await connect()
            if link.protocol != "h2":
                link.close()
                self.refused = True
                return
            self.links.append(link)
            self._close_unused()
        finally:
            self._opening = None

    def _close_unused(self) -> None:
        """If no follow waits for a stream any more, close the connections that carry none: an opening's
        followers that all gave up (before it settled, or before they resumed) took none of it."""
        if not self._waiting:
            for link in self.links:
                link.close_if_idle()

    def close(self) -> None:
        for link in self.links:
            link.close()
        self.links.clear()


def request_headers(authority: str, target: str, headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """An HTTP/2 GET's header list: the pseudo-headers, then ``headers`` in lower case."""
    fields = [(":method", "GET"), (":scheme", "https"), (":authority", authority), (":path", target)]
    fields += [(name.lower(), value) for name, value in headers.items() if name.lower() != "host"]
    return fields

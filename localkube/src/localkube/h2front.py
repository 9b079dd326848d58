"""HTTP/2 over TLS in front of localkube, as a real kube-apiserver serves its clients.

A real kube-apiserver (Go's net/http) negotiates "h2" by ALPN and multiplexes every request of a client on
one TLS connection: it announces SETTINGS_MAX_CONCURRENT_STREAMS, sends DATA only within the client's
flow-control windows, says GOAWAY on graceful shutdown (and at random with --goaway-chance) and answers
RST_STREAM. localkube's aiohttp server speaks HTTP/1.1 only, so :class:`H2Front` terminates TLS and HTTP/2
and proxies each stream to it (one shared aiohttp session), streaming each answer back as it arrives: a
``follow=true`` log or a watch streams. A client that negotiates "http/1.1" (or nothing) gets a plain byte
pipe to the upstream port instead.

Tests drive the front: :meth:`H2Front.goaway`, :meth:`H2Front.reset` and :meth:`H2Front.drop` do to the
client what a real server's shutdown, a cancelled stream and a broken connection do; :attr:`H2Front.hold`
(a gate's name, :mod:`localkube.gates`) keeps new HTTP/2 connections from their SETTINGS until it opens, as
a slow server would: their clients cannot open a stream meanwhile.

``python -m localkube.h2front --upstream http://127.0.0.1:PORT [--max-streams N]`` prints the front's port
and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame
from multidict import CIMultiDict
from yarl import URL

from localkube.gates import gate
from localkube.kubeconfig import write_kubeconfig
from localkube.kubeletapi import self_signed, serving_context

# Connection-specific headers: HTTP/2 forbids them (RFC 9113 8.2.2), and the upstream's are about its own
# HTTP/1.1 connection.
HOP_BY_HOP = frozenset({"connection", "transfer-encoding", "keep-alive", "proxy-connection", "upgrade"})
# Not copied upstream besides those: aiohttp writes Host from the URL and Content-Length from the body.
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "te"}
READ_SIZE = 65536


@dataclass
class _Stream:
    """One request stream: what the client sent, and the task that answers it."""

    id: int
    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytearray = field(default_factory=bytearray)
    window: asyncio.Event = field(default_factory=asyncio.Event)  # set when the client may take more
    task: asyncio.Task[None] | None = None


class _Client:
    """One TLS connection: its writer, and (HTTP/2) its h2 state and open streams."""

    def __init__(self, front: H2Front, writer: asyncio.StreamWriter) -> None:
        self.front = front
        self.writer = writer
        self.h2: h2.connection.H2Connection | None = None
        self.streams: dict[int, _Stream] = {}
        self.highest = 0  # the highest stream id taken for processing (GOAWAY's last_stream_id)
        self.going_away = False

    # -- HTTP/2 --------------------------------------------------------------------------------------------

    async def serve_h2(self, reader: asyncio.StreamReader) -> None:
        if self.front.hold is not None and not await self.held(self.front.hold):
            return
        settings = h2.settings.SettingCodes
        conn = self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                settings.MAX_CONCURRENT_STREAMS: self.front.max_concurrent_streams,
                settings.MAX_HEADER_LIST_SIZE: 1 << 20,  # Go's default (http.DefaultMaxHeaderBytes)
            },
        )
        conn.initiate_connection()
        self.flush()
        try:
            while data := await reader.read(READ_SIZE):
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break  # h2 has queued GOAWAY(PROTOCOL_ERROR); the finally sends it
                for event in events:
                    if not self.handle(event):
                        return
                self.flush()
        finally:
            self.flush()
            tasks = [stream.task for stream in self.streams.values() if stream.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def held(self, name: str) -> bool:
        """Wait at gate ``name`` before anything is sent; False if the client closed meanwhile."""
        opened = asyncio.ensure_future(gate(name).wait(f"h2 connection {self.front.connections_made}"))
        closed = asyncio.ensure_future(self.closed())
        try:
            await asyncio.wait({opened, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
            closed.cancel()
        return opened.done() and not opened.cancelled()

    async def closed(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):  # how it closed does not matter here
            await self.writer.wait_closed()

    def handle(self, event: h2.events.Event) -> bool:
        """Apply one event from the client; False when the connection is over."""
        assert self.h2 is not None
        if isinstance(event, h2.events.RequestReceived):
            self.request(event)
            return True
        if isinstance(event, h2.events.ConnectionTerminated):
            return False
        stream_id = getattr(event, "stream_id", None) or 0
        stream = self.streams.get(stream_id)
        if isinstance(event, h2.events.DataReceived):
            if stream is not None and event.data is not None:
                stream.body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
        elif isinstance(event, h2.events.StreamEnded) and stream is not None and stream.task is None:
            self.start(stream)
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            self.cancel(stream)
        elif isinstance(event, h2.events.WindowUpdated) and stream is not None:
            stream.window.set()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged) and not stream_id:
            for each in self.streams.values():  # the connection's window, or every stream's initial one
                each.window.set()
        return True

    def request(self, event: h2.events.RequestReceived) -> None:
        assert self.h2 is not None and event.stream_id is not None and event.headers is not None
        if self.going_away:  # after GOAWAY no new stream is processed: the client retries it elsewhere
            self.h2.reset_stream(event.stream_id, ErrorCodes.REFUSED_STREAM)
            return
        pairs = [(str(name), str(value)) for name, value in event.headers]
        pseudo = {name: value for name, value in pairs if name.startswith(":")}
        headers = CIMultiDict(
            (name, value) for name, value in pairs if not name.startswith(":") and name not in NOT_FORWARDED
        )
        stream = _Stream(event.stream_id, pseudo.get(":method", "GET"), pseudo.get(":path", "/"), headers)
        self.streams[stream.id] = stream
        self.highest = max(self.highest, stream.id)
        self.front.streams_opened += 1
        if event.stream_ended is not None:
            self.start(stream)

    def cancel(self, stream: _Stream) -> None:
        """The stream is over for the client: end its upstream request (or forget the unstarted one)."""
        if stream.task is not None:
            stream.task.cancel()
        else:
            self.finished(stream)

    def start(self, stream: _Stream) -> None:
        stream.task = asyncio.get_running_loop().create_task(self.respond(stream))

    async def respond(self, stream: _Stream) -> None:
        """Proxy the stream's request upstream and stream the answer back within the client's windows."""
        assert self.h2 is not None
        conn, sent_headers, complete = self.h2, False, False
        response: aiohttp.ClientResponse | None = None
        try:
            response = await self.front.session.request(
                stream.method,
                URL(self.front.upstream + stream.path, encoded=True),
                headers=stream.headers,
                data=bytes(stream.body) if stream.body else None,
                allow_redirects=False,
            )
            headers = [(":status", str(response.status))] + [
                (name.decode("latin-1").lower(), value.decode("latin-1"))
                for name, value in response.raw_headers
                if name.decode("latin-1").lower() not in HOP_BY_HOP
            ]
            conn.send_headers(stream.id, headers)
            sent_headers = True
            self.flush()
            async for chunk in response.content.iter_any():
                await self.send(stream, chunk)
            conn.end_stream(stream.id)
            self.flush()
            complete = True
        except aiohttp.ClientError as exc:
            if not sent_headers:
                body = f"h2front: upstream {type(exc).__name__}: {exc}\n".encode()
                conn.send_headers(stream.id, [(":status", "502"), ("content-type", "text/plain")])
                await self.send(stream, body)
                conn.end_stream(stream.id)
            else:
                conn.reset_stream(stream.id, ErrorCodes.INTERNAL_ERROR)
            self.flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass  # the client went away, or closed the stream: nobody to answer
        finally:
            if response is not None and complete:
                response.release()
            elif response is not None:  # an unfinished body must not go back to the pool: end the request
                response.close()
            self.finished(stream)

    async def send(self, stream: _Stream, data: bytes) -> None:
        """DATA frames for `data`, never beyond the stream's or the connection's window (waits for the
        client's WINDOW_UPDATE) nor the client's SETTINGS_MAX_FRAME_SIZE."""
        assert self.h2 is not None
        view = memoryview(data)
        while view:
            window = self.h2.local_flow_control_window(stream.id)
            if window <= 0:
                stream.window.clear()
                await stream.window.wait()
                continue
            size = min(window, self.h2.max_outbound_frame_size, len(view))
            self.h2.send_data(stream.id, bytes(view[:size]))
            view = view[size:]
            self.flush()
            await self.writer.drain()

    def finished(self, stream: _Stream) -> None:
        if self.streams.pop(stream.id, None) is not None and self.going_away and not self.streams:
            self.flush()
            self.writer.close()

    def goaway(self) -> None:
        """GOAWAY(NO_ERROR) naming the last stream taken; the connection closes when its streams end.
        Written by hand: after h2 sends GOAWAY it refuses to send DATA, and the open streams go on."""
        if self.h2 is None or self.going_away or self.writer.is_closing():
            return
        self.going_away = True
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.highest
        frame.error_code = ErrorCodes.NO_ERROR
        self.flush()
        self.writer.write(frame.serialize())
        if not self.streams:
            self.writer.close()

    def reset(self, path_contains: str) -> None:
        if self.h2 is None or self.writer.is_closing():
            return
        for stream in list(self.streams.values()):
            if path_contains in stream.path:
                self.h2.reset_stream(stream.id, ErrorCodes.CANCEL)
                self.cancel(stream)
        self.flush()

    def flush(self) -> None:
        if self.h2 is not None and not self.writer.is_closing():
            data = self.h2.data_to_send()
            if data:
                self.writer.write(data)

    # -- HTTP/1.1 ------------------------------------------------------------------------------------------

    async def pipe(self, reader: asyncio.StreamReader) -> None:
        """The decrypted bytes to and from the upstream port, unchanged, until either side ends."""
        upstream = urlsplit(self.front.upstream)
        up_reader, up_writer = await asyncio.open_connection(upstream.hostname, upstream.port)
        try:
            copies = [
                asyncio.ensure_future(_copy(reader, up_writer)),
                asyncio.ensure_future(_copy(up_reader, self.writer)),
            ]
            try:
                await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for copy in copies:
                    copy.cancel()
                await asyncio.gather(*copies, return_exceptions=True)
        finally:
            up_writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(READ_SIZE):
            writer.write(data)
            await writer.drain()


class H2Front:
    """A TLS listener on 127.0.0.1 that serves HTTP/2 (and, by ALPN, HTTP/1.1 as a byte pipe) in front of
    the plain-HTTP server at `upstream`. It runs on the caller's event loop."""

    def __init__(
        self,
        upstream: str,
        *,
        max_concurrent_streams: int = 100,
        alpn: tuple[str, ...] = ("h2", "http/1.1"),
    ) -> None:
        if not upstream.startswith("http://"):
            raise ValueError(f"upstream: a plain http:// URL, got {upstream!r}")
        if max_concurrent_streams < 1:
            raise ValueError(f"max_concurrent_streams: at least 1, got {max_concurrent_streams}")
        self.upstream = upstream.rstrip("/")
        self.max_concurrent_streams = max_concurrent_streams
        self.alpn = alpn
        self.url = ""
        self.certificate = b""  # PEM, self-signed for 127.0.0.1: what a client that verifies trusts
        self.kubeconfig: Path | None = None
        self.connections_made = 0
        self.streams_opened = 0
        self.hold: str | None = None  # a gate each new HTTP/2 connection waits at before its SETTINGS
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._clients: set[_Client] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("start the front first")
        return self._session

    @property
    def connections(self) -> int:
        """TLS connections open now (HTTP/2 and piped)."""
        return len(self._clients)

    @property
    def open_streams(self) -> int:
        """HTTP/2 streams open now, over every connection."""
        return sum(len(client.streams) for client in self._clients)

    async def start(self) -> None:
        certificate = self_signed("127.0.0.1", "localkube-h2front")
        self.certificate = certificate[0]
        context = serving_context("127.0.0.1", "localkube-h2front", certificate=certificate)
        context.set_alpn_protocols(list(self.alpn))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # one upstream connection per concurrent stream
            timeout=aiohttp.ClientTimeout(total=None),  # watches and follows last
            auto_decompress=False,  # the bytes go to the client as they came
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),  # only the client's
        )
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=context)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"https://127.0.0.1:{port}"

    def write_kubeconfig(self, path: str | Path, token: str, namespace: str = "default") -> Path:
        """A kubeconfig for the front: its URL, its certificate as the authority, the upstream's token."""
        if not self.url:
            raise RuntimeError("start the front before writing its kubeconfig")
        self.kubeconfig = write_kubeconfig(path, self.url, token, namespace, self.certificate)
        return self.kubeconfig

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        client = _Client(self, writer)
        self._clients.add(client)
        self._tasks.add(task)
        self.connections_made += 1
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
                await client.serve_h2(reader)
            else:
                await client.pipe(reader)
        except (ConnectionError, OSError):
            pass  # the client or the upstream went away: nothing to answer
        finally:
            self._clients.discard(client)
            self._tasks.discard(task)
            writer.close()

    async def goaway(self) -> None:
        """GOAWAY(NO_ERROR, last_stream_id = the highest stream taken) on every HTTP/2 connection; each
        closes once its open streams end (Go's graceful shutdown). The front goes on accepting connections,
        as a kube-apiserver with --goaway-chance does."""
        for client in list(self._clients):
            client.goaway()

    def reset(self, path_contains: str) -> None:
        """RST_STREAM(CANCEL) on every open stream whose :path contains `path_contains`; their upstream
        requests are closed."""
        for client in list(self._clients):
            client.reset(path_contains)

    def drop(self) -> None:
        """Close every connection's transport at once: no GOAWAY, no TLS close_notify."""
        for client in list(self._clients):
            client.writer.transport.abort()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        # Each connection's handler ends on its own once its transport is aborted. Cancelling one instead
        # makes Python 3.11's start_server log the CancelledError as an error.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _serve(front: H2Front) -> None:
    await front.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(urlsplit(front.url).port, flush=True)
    try:
        await stop.wait()
    finally:
        await front.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localkube.h2front",
        description="HTTP/2 over TLS in front of a localkube server; prints its port, serves until killed",
    )
    parser.add_argument("--upstream", required=True, help="the localkube server, http://127.0.0.1:PORT")
    parser.add_argument("--max-streams", type=int, default=100, help="SETTINGS_MAX_CONCURRENT_STREAMS")
    args = parser.parse_args(argv)
    try:
        front = H2Front(args.upstream, max_concurrent_streams=args.max_streams)
    except ValueError as exc:
        parser.error(str(exc))
    asyncio.run(_serve(front))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""HTTP access to the Kubernetes API on httpx, configured by a
:class:`~airflow_provider_training.hooks.kubeconfig.ClusterConfig` (server, credentials, TLS, proxy).

Every request, watch and log follow goes through one ``httpx.AsyncClient`` per API server and TLS settings,
shared by every transport of the process on one event loop: HTTP/1.1, a connection per open watch or follow
(see :data:`HTTP2` for why not one HTTP/2 connection, as client-go's). Answers are read as bytes and
decoded by us (JSON for objects, lines for streams). httpx's errors become
:class:`~.errors.KubeConnectionError` here, at the one place a request is sent or read, so retrying
(:mod:`.retry`) looks at our own error type only.

A connection that goes silent (a peer gone without a word, a cut network path) is noticed by TCP keepalive
within :data:`DEAD_AFTER` seconds, and every stream on it raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import socket
import ssl
import urllib.request
import weakref
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import httpx

from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError
from airflow_provider_training.kinds.api import Query, describe_request
from airflow_provider_training.offloop import once_in_thread

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from airflow_provider_training.hooks.kubeconfig import ClusterConfig
    from airflow_provider_training.server_clock import ServerClock

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "airflow-provider-training"

HTTP2 = False
"""Whether the clients offer HTTP/2 (by ALPN, over TLS). Off: httpcore's HTTP/2 connection lets one waiting
stream at a time read the socket, and a stream that waits for data holds that turn while it waits. With two
or more quiet streams open (follows of pods that say nothing, quiet watches) an answer that has arrived for
another request stays unread until one of them gets data: a GET waited 60 s on the real kube-apiserver with
three quiet follows open (httpx 0.29 and httpx2 2.17 alike; ``tests/real/test_h2_follows.py``). Over
HTTP/1.1 each watch and follow holds a connection of its own, and no request waits behind another."""
LANE_STREAMS = 100
"""The requests one client ("lane") carries at once. httpcore announces ``SETTINGS_MAX_CONCURRENT_STREAMS``
100 and opens no second HTTP/2 connection to a server while its first is usable: request 101 waits for a
stream to end. Watches and follows last for hours, so a lane that carries this many takes no more, and the
next lane (a client, so a connection, of its own) opens: a further connection per 100 long-lived streams, as
client-go opens one when a server's stream limit is reached."""
RETIRE_AFTER = LANE_STREAMS // 4
"""httpcore does not reset an HTTP/2 stream closed before its end (a follow of a running pod that is no longer
wanted): the server goes on sending, and what it sends is acknowledged only as it is read. Such a stream is
drained in the background (read and dropped) so that it cannot stall the others, and a lane that drained this
many takes no new streams and closes with its last one."""
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 20, 5, 4
DEAD_AFTER = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES
"""Seconds of silence after which a connection is dead: probed after 20 s, every 5 s, gone after 4 unanswered
probes (TCP_USER_TIMEOUT bounds unacknowledged data alike)."""
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=90.0)
# Unlimited: each HTTP/1.1 watch or follow holds a connection. 90 s idle, as client-go's IdleConnTimeout.


def keepalive_options() -> list[tuple[int, int, int]]:
    """The TCP keepalive socket options (those this platform has: TCP_KEEPIDLE and TCP_USER_TIMEOUT are
    Linux's)."""
    wanted = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", KEEPALIVE_IDLE),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", KEEPALIVE_PROBES),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", DEAD_AFTER * 1000),
    ]
    return [(level, getattr(socket, name), value) for level, name, value in wanted if hasattr(socket, name)]


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def connection_error(server: str, err: httpx.HTTPError) -> KubeConnectionError:
    """``err`` as our error: a certificate that cannot be verified is final (as kubectl's ``x509`` errors);
    a connection refused, reset, cut or timed out is transient; a request httpx cannot send is not."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return KubeConnectionError(
                f"the TLS certificate of the Kubernetes API server {server} could not be verified ({cause}): "
                "check the cluster's certificate-authority (or tls-server-name) in the kubeconfig",
                transient=False,
            )
        cause = cause.__cause__ or cause.__context__
    transient = isinstance(err, httpx.TransportError) and not isinstance(
        err, httpx.UnsupportedProtocol | httpx.LocalProtocolError
    )
    return KubeConnectionError(
        f"the Kubernetes API server {server}: {type(err).__name__}: {err}".rstrip(": "), transient=transient
    )


@contextlib.contextmanager
def _as_ours(server: str) -> Iterator[None]:
    """httpx's errors raised as :class:`KubeConnectionError` (see :func:`connection_error`)."""
    try:
        yield
    except httpx.HTTPError as err:
        raise connection_error(server, err) from err


@contextlib.asynccontextmanager
async def _within(seconds: float | None, server: str, what: str) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as err:
        raise KubeConnectionError(
            f"the Kubernetes API server {server} {what} {seconds} s", transient=True
        ) from err


_background: set[asyncio.Task[Any]] = set()  # closes and drains under way (the loop keeps weak references)


def _spawn(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


class _Lane:
    """One client of a :class:`_Pool` and the requests it carries (``live``) or drains."""

    __slots__ = ("client", "drained", "live", "pool", "retired")

    def __init__(self, pool: _Pool, client: httpx.AsyncClient) -> None:
        self.pool, self.client = pool, client
        self.live = self.drained = 0
        self.retired = False  # takes no new requests; closed with its last live one

    def release(self) -> None:
        self.live -= 1
        self.settle()

    def drain(self, rest: Coroutine[Any, Any, Any]) -> None:
        """An unfinished HTTP/2 stream was closed: ``rest`` reads it to its end in the background."""
        self.live -= 1
        self.drained += 1
        self.retired = self.retired or self.drained >= RETIRE_AFTER
        _spawn(rest).add_done_callback(lambda _: setattr(self, "drained", self.drained - 1))
        self.settle()

    def settle(self) -> None:
        if self.retired and self.live == 0 and self in self.pool.lanes:
            self.pool.lanes.remove(self)
            _spawn(self.client.aclose())


class _Pool:
    """The lanes to one API server with one set of TLS settings on one event loop, shared by every transport
    using them; retired when its last transport closes."""

    def __init__(self, key: tuple[Any, ...], context: ssl.SSLContext | None, proxy: str | None) -> None:
        self.key, self.context, self.proxy = key, context, proxy
        self.lanes: list[_Lane] = []
        self.users = 0

    def take(self) -> _Lane:
        """A lane with room for one more request (a new one when none has), that request counted."""
        lane = next((lane for lane in self.lanes if not lane.retired and lane.live < LANE_STREAMS), None)
        if lane is None:
            transport = httpx.AsyncHTTPTransport(
                verify=self.context or False,  # False for http://: no CA bundle is loaded
                http2=HTTP2,
                limits=LIMITS,
                proxy=self.proxy,
                trust_env=False,
                socket_options=keepalive_options(),
            )
            lane = _Lane(self, httpx.AsyncClient(transport=transport, trust_env=False))
            self.lanes.append(lane)
        lane.live += 1
        return lane

    async def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            pools = _pools.get(asyncio.get_running_loop(), {})
            if pools.get(self.key) is self:
                del pools[self.key]
            for lane in list(self.lanes):
                lane.retired = True
                if lane.live == 0:
                    self.lanes.remove(lane)
                    await lane.client.aclose()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], _Pool]] = (
    weakref.WeakKeyDictionary()
)


def environment_proxy(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY``/``HTTP_PROXY`` by its scheme, unless
    ``NO_PROXY`` covers it), as kubectl reads it."""
    parts = urlsplit(server)
    if urllib.request.proxy_bypass(parts.netloc):
        return None
    return urllib.request.getproxies().get(parts.scheme)


async def _pool_for(configuration: ClusterConfig, key: tuple[Any, ...]) -> _Pool:
    """The running loop's pool for ``key``, with one more user. The TLS context (loading a CA bundle costs
    tens of milliseconds) is built in a worker thread, once per process and TLS settings."""
    pools = _pools.setdefault(asyncio.get_running_loop(), {})
    if key not in pools:
        context = None
        if not configuration.host.startswith("http://"):
            context = await once_in_thread(("ssl", *key), configuration.ssl_context)
        proxy = configuration.proxy or environment_proxy(configuration.host)
        pools.setdefault(key, _Pool(key, context, proxy))  # another transport may have made it meanwhile
    pool = pools[key]
    pool.users += 1
    return pool


class LineStream:
    """A streamed answer (a log follow, a watch) read as lines: ``await lines()`` gives the next complete
    ones (split on ``\\n`` only: a log line may hold ``\\r``), the last line without a newline at the end,
    then ``None``; ``close()`` it when done. Silence for ``idle`` seconds raises a transient
    :class:`KubeConnectionError`."""

    __slots__ = ("_body", "_chunks", "_ended", "_idle", "_lane", "_response", "_server", "status")

    def __init__(self, response: httpx.Response, lane: _Lane, idle: float | None, server: str) -> None:
        self.status = response.status_code
        self._response, self._idle, self._server = response, idle, server
        self._lane: _Lane | None = lane
        self._chunks = response.aiter_bytes()
        self._body = bytearray()
        self._ended = False

    async def lines(self) -> list[bytes] | None:
        while (cut := self._body.rfind(b"\n")) < 0:
            if self._ended:
                if not self._body:
                    return None
                last = bytes(self._body)
                self._body.clear()
                return [last]
            async with _within(self._idle, self._server, "sent nothing on a stream for"):
                with _as_ours(self._server):
                    chunk = await anext(self._chunks, None)
            if chunk is None:
                self._ended = True
            else:
                self._body += chunk
        taken = [bytes(line) for line in self._body[:cut].split(b"\n")]
        del self._body[: cut + 1]
        return taken

    def close(self) -> None:
        """Stop reading: an unfinished HTTP/2 stream is drained (see :data:`RETIRE_AFTER`), an HTTP/1.1
        answer's connection closed."""
        lane, self._lane = self._lane, None
        if lane is None:
            return
        if self._ended or self._response.http_version != "HTTP/2":
            _spawn(self._response.aclose())
            lane.release()
        else:
            lane.drain(self._drain())

    async def _drain(self) -> None:
        with contextlib.suppress(Exception):
            async for _ in self._chunks:
                pass
        await self._response.aclose()


class KubeTransport:
    """Requests on one configuration: counted, timed out and re-authenticated per transport, sent over the
    loop's shared clients of that configuration (see :class:`_Pool`), joined on the first request."""

    def __init__(
        self,
        configuration: ClusterConfig,
        *,
        request_timeout: float = 60.0,
        reload_credentials: Callable[[], Awaitable[ClusterConfig]] | None = None,
    ) -> None:
        self._configuration = configuration
        self._pool: _Pool | None = None
        self._timeout = request_timeout
        self._connect = httpx.Timeout(None, connect=min(30.0, request_timeout))
        # A read timeout would fail every stream of an HTTP/2 connection (httpcore marks it broken), so the
        # timeouts are ours: the request's total here, a stream's silence in LineStream, dead peers by TCP.
        # Short-lived credentials (exec plugins: EKS, GKE) expire; on a 401 they are loaded again, once.
        self._reload_credentials = reload_credentials
        self.requests = 0

    @property
    def clock(self) -> ServerClock:
        """The API server's clock, from the answers of every transport on this configuration."""
        return self._configuration.clock

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.release()

    async def _pooled(self) -> _Pool:
        """The pool for the configuration's current TLS inputs (a rotated client certificate: a new one)."""
        cfg = self._configuration
        key = (cfg.host, cfg.proxy, *cfg.tls_key())
        if self._pool is None or self._pool.key != key:
            pool = await _pool_for(cfg, key)
            old, self._pool = self._pool, pool
            if old is not None:
                await old.release()
        return self._pool

    async def _send(
        self, method: str, path: str, query: Query | None, body: Any, content_type: str, accept: str
    ) -> tuple[httpx.Response, _Lane]:
        """Send; the answer's head read. After a 401 the credentials are loaded again and it is sent once
        more. An error answer (not 2xx) is read whole and raised as :class:`KubeApiError`."""
        cfg = self._configuration
        params = list(query or ())
        url = f"{cfg.host}{path}" + (f"?{urlencode(params)}" if params else "")
        content = None if body is None else json.dumps(body, default=_json_default).encode()
        extensions = {"sni_hostname": cfg.tls_server_name} if cfg.tls_server_name else {}
        retried = False
        while True:
            self.requests += 1
            headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": USER_AGENT}
            headers.update(await cfg.auth_headers())  # exec plugins refresh their token first
            lane = (await self._pooled()).take()
            try:
                with _as_ours(cfg.host):
                    request = lane.client.build_request(
                        method,
                        url,
                        headers=headers,
                        content=content,
                        timeout=self._connect,
                        extensions=extensions,
                    )
                    response = await lane.client.send(request, stream=True)
            except BaseException:
                lane.release()
                raise
            cfg.clock.saw(response.headers.get("Date"))
            if 200 <= response.status_code < 300:
                return response, lane
            try:
                with _as_ours(cfg.host):
                    raw = await response.aread()
            finally:
                await response.aclose()
                lane.release()
            if response.status_code == 401 and not retried and self._reload_credentials is not None:
                retried = True
                cfg.take_credentials(await self._reload_credentials())
                continue
            error = KubeApiError.from_response(response.status_code, raw, response.headers)
            error.request = describe_request(method, path, query)
            raise error

    async def _whole(
        self, method: str, path: str, query: Query | None, body: Any, content_type: str, accept: str
    ) -> bytes:
        async with _within(self._timeout, self._configuration.host, "did not answer within"):
            response, lane = await self._send(method, path, query, body, content_type, accept)
            try:
                with _as_ours(self._configuration.host):
                    return await response.aread()
            finally:
                await response.aclose()
                lane.release()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request; the JSON answer as a dict. Raises :class:`KubeApiError` on a non-2xx answer."""
        raw = await self._whole(method, path, query, body, content_type, "application/json")
        return json.loads(raw) if raw else {}

    async def read_bytes(self, path: str, *, query: Query | None = None) -> bytes:
        """One GET whose body is not JSON (pod logs), as raw bytes."""
        return await self._whole("GET", path, query, None, "application/json", "*/*")

    async def open_stream(
        self, path: str, *, query: Query | None = None, idle_timeout: float | None = None
    ) -> LineStream:
        """A long-lived GET (a watch, a log follow), its answer's head read (within the request timeout);
        ``close()`` it when done. Raises :class:`KubeApiError` on a non-2xx answer."""
        async with _within(self._timeout, self._configuration.host, "did not answer within"):
            response, lane = await self._send("GET", path, query, None, "application/json", "*/*")
        return LineStream(response, lane, idle_timeout, self._configuration.host)

"""Raw HTTP access to the Kubernetes API over shared aiohttp sessions, configured by a
:class:`~airflow_provider_training.hooks.kubeconfig.ClusterConfig` (host, credentials, TLS, proxy).

Every answer is read as bytes and decoded by us: JSON for objects and lists, UTF-8 (``errors="replace"``) for
logs. This sidesteps the client's model (de)serialization, which the provider does not need (it works on plain
dicts), and the kubernetes 36.x pod-log quirks. Retries are the caller's business (see :mod:`.retry`).

Every transport of one configuration on one event loop shares its session (connection pool): a triggerer's
thousand triggers and their log streams hold one, not one each. The TLS context (loading the CA bundle
costs tens of milliseconds of CPU and most of a megabyte) is built in a worker thread, once per process and
TLS settings, and only for ``https://`` servers: many triggers starting together on the triggerer's loop
must not each build one there (kubernetes_asyncio's ``ApiClient`` builds one per client).

A followed log (``follow=true``, one per streamed pod, a triggerer holds thousands) does not go through the
session: :class:`LineStream` is one connection that sends its GET and parses the HTTP/1.1 answer itself, and
holds little more than its socket while the pod says nothing (an aiohttp response with its reader, protocol,
parser and connection bookkeeping held some 13 KiB). Through a proxy it goes through the session as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.helpers import get_env_proxy_for_url
from multidict import CIMultiDict
from yarl import URL

from airflow_provider_training.hooks.errors import ApiRequest, KubeApiError
from airflow_provider_training.kinds.base import ResourceRef
from airflow_provider_training.offloop import import_off_loop, once_in_thread

if TYPE_CHECKING:
    from airflow_provider_training.hooks.kubeconfig import ClusterConfig, ServerClock
    from airflow_provider_training.hooks.multiplex import H2Links

Query = Iterable[tuple[str, str]]

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "airflow-provider-training"
READ_BUFFER = 2**21  # as kubernetes_asyncio: watch events of large objects exceed aiohttp's default
LINES_BUFFER = 2**20  # a followed log's reading pauses while this many bytes wait to be handed on
LINES_PIECE = 2**16  # lines are handed on in pieces of about this many bytes
MAX_HEAD = 2**16  # the longest response head (or chunk size line) accepted
TLS_READ = 2**16  # the most plain bytes taken from a TLS session at once
MULTIPLEX = "airflow_provider_training.hooks.multiplex"
# Offered by follows over TLS. Both: Go's TLS refuses a client that names no protocol it serves.
ALPN = ("h2", "http/1.1")


def collection_path(resource: ResourceRef, namespace: str | None) -> str:
    """``/api/v1/namespaces/ns/pods`` or ``/apis/group/version/namespaces/ns/plural``."""
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    return f"{base}/{resource.plural}"


def object_path(
    resource: ResourceRef, namespace: str | None, name: str, subresource: str | None = None
) -> str:
    path = f"{collection_path(resource, namespace)}/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def describe_request(method: str, path: str, query: Query | None = None) -> ApiRequest:
    """What a request asks, as RBAC names it: ``list pods in namespace default``, ``get pods/log
    default/x-master-0``, ``watch pytorchjobs.kubeflow.org in namespace default``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] not in (["api"], ["apis"]):  # /version, /healthz: not a resource
        return ApiRequest(method, path=path)
    group, rest = ("", parts[2:]) if parts[:1] == ["api"] else ("".join(parts[1:2]), parts[3:])
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return ApiRequest(method, path=path)
    resource = f"{rest[0]}.{group}" if group else rest[0]
    if len(rest) > 2:
        resource += f"/{rest[2]}"
    if len(rest) > 1:
        return ApiRequest(_VERBS.get(method, "get"), resource, namespace, rest[1], path)
    watching = any(k == "watch" and v in ("true", "1") for k, v in query or ())
    verb = "watch" if watching else ("list" if method == "GET" else _VERBS.get(method, method.lower()))
    return ApiRequest(verb, resource, namespace, path=path)


class _Pool:
    """The aiohttp session of one configuration on one event loop, shared by every transport using it.

    Its connections are not capped: each watch and log follow holds one for its whole life (a triggerer
    following a thousand pods needs a thousand), and the short requests of many triggers ending together
    must not queue behind a cap their own clients never had (at N = 1,000 with logs, a cap of 100 left the
    jobs' final reads unanswered a minute after they ended). No TLS context for a plain ``http://`` server.
    Closed when its last transport closes.
    """

    def __init__(self, configuration: ClusterConfig, pools: dict[int, _Pool]) -> None:
        self.configuration = configuration
        self.pools = pools  # its loop's pools, by configuration
        self.users = 0
        self.session: aiohttp.ClientSession | None = None
        self.goes_direct: bool | None = None
        self.h2: H2Links | None = None  # the log follows' HTTP/2 connections (over TLS)

    async def tls(self, alpn: tuple[str, ...] = ()) -> ssl.SSLContext | None:
        """The shared TLS context (``None`` for a plain ``http://`` server), offering ``alpn``."""
        cfg = self.configuration
        return None if str(cfg.host).startswith("http://") else await shared_ssl_context(cfg, alpn)

    async def multiplexed(self) -> H2Links:
        """The follows' HTTP/2 connections; the ``h2`` library is imported in a thread the first time."""
        if self.h2 is None:
            await import_off_loop(MULTIPLEX)
            from airflow_provider_training.hooks.multiplex import H2Links

            self.h2 = self.h2 or H2Links()
        return self.h2

    def direct(self) -> bool:
        """Whether requests reach the server without a proxy: none configured (``proxy-url``) and none
        from the environment (``HTTPS_PROXY``, ``NO_PROXY``: the session trusts it)."""
        if self.goes_direct is None:
            try:
                self.goes_direct = not self.configuration.proxy and not get_env_proxy_for_url(
                    URL(str(self.configuration.host))
                )
            except LookupError:  # no proxy for this server in the environment
                self.goes_direct = True
        return self.goes_direct

    async def open(self) -> aiohttp.ClientSession:
        if self.session is None:
            context = await self.tls()
            if self.session is None:  # another transport may have opened it meanwhile
                connector = aiohttp.TCPConnector(limit=0, ssl=context or False)
                self.session = aiohttp.ClientSession(
                    connector=connector, trust_env=True, read_bufsize=READ_BUFFER
                )
        return self.session

    async def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            if self.pools.get(id(self.configuration)) is self:
                del self.pools[id(self.configuration)]
            if self.h2 is not None:
                self.h2.close()
            session, self.session = self.session, None
            if session is not None:
                await session.close()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _Pool]] = weakref.WeakKeyDictionary()


def _pool_for(configuration: ClusterConfig) -> _Pool:
    """The running loop's pool for ``configuration`` (one object per connection, see
    ``connection.shared_configuration``; the pool holds it, so its id stays its own), with one more user."""
    pools = _pools.setdefault(asyncio.get_running_loop(), {})
    pool = pools.get(id(configuration))
    if pool is None:
        pool = pools[id(configuration)] = _Pool(configuration, pools)
    pool.users += 1
    return pool


class _Answer(Protocol):
    """An HTTP answer (an aiohttp response, a :class:`PushedLines`) as the credential retry and the error
    check see it."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str] | None: ...

    async def read(self) -> bytes: ...

    def release(self) -> Any: ...


AnswerT = TypeVar("AnswerT", bound=_Answer)


class KubeTransport:
    """Requests on one configuration: counted, timed out and re-authenticated per transport, sent over the
    loop's shared session of that configuration (see :class:`_Pool`), joined on the first request."""

    def __init__(
        self,
        configuration: ClusterConfig,
        *,
        request_timeout: float = 60.0,
        reload_credentials: Callable[[], Awaitable[ClusterConfig]] | None = None,
    ) -> None:
        self._configuration = configuration
        self._pool: _Pool | None = None
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=min(30.0, request_timeout))
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

    def _pooled(self) -> _Pool:
        if self._pool is None:
            self._pool = _pool_for(self._configuration)
        return self._pool

    async def _open(self) -> aiohttp.ClientSession:
        return await self._pooled().open()

    async def _send(self, method: str, path: str, query: Query | None, *rest: Any) -> aiohttp.ClientResponse:
        request = describe_request(method, path, query)
        return await self._authorized(lambda: self._send_once(method, path, query, *rest), request)

    async def _authorized(self, send: Callable[[], Awaitable[AnswerT]], request: ApiRequest) -> AnswerT:
        """``send()``'s answer; after a 401 the credentials are loaded again and it is sent once more. An
        error answer (not 2xx) is read whole, released (an aiohttp connection goes back to the pool) and
        raised as :class:`KubeApiError` (on ``request``)."""
        answer = await send()
        if answer.status == 401 and self._reload_credentials is not None:
            answer.release()
            fresh = await self._reload_credentials()
            self._configuration.take_credentials(fresh)
            answer = await send()
        self._configuration.clock.saw((answer.headers or {}).get("Date"))
        if not 200 <= answer.status < 300:
            try:
                raw = await answer.read()
            finally:
                answer.release()
            error = KubeApiError.from_response(answer.status, raw, answer.headers or CIMultiDict())
            error.request = request
            raise error
        return answer

    async def _headers(self, accept: str, content_type: str = "application/json") -> dict[str, str]:
        self.requests += 1
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": USER_AGENT}
        headers.update(await self._configuration.auth_headers())  # exec plugins refresh their token first
        return headers

    def _url(self, path: str, query: Query | None) -> str:
        params = list(query or ())
        return f"{self._configuration.host}{path}" + (f"?{urlencode(params)}" if params else "")

    async def _send_once(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        content_type: str,
        accept: str,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        session = await self._open()
        cfg = self._configuration
        return await session.request(
            method,
            self._url(path, query),
            headers=await self._headers(accept, content_type),
            data=None if body is None else json.dumps(body, default=_json_default),
            timeout=timeout,
            proxy=cfg.proxy,
            server_hostname=cfg.tls_server_name,
        )

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
        resp = await self._send(method, path, query, body, content_type, "application/json", self._timeout)
        async with resp:
            raw = await resp.read()
        return json.loads(raw) if raw else {}

    async def read_bytes(self, path: str, *, query: Query | None = None) -> bytes:
        """One GET whose body is not JSON (pod logs), as raw bytes. Over TLS without a proxy it is a stream
        of the follows' HTTP/2 connections: when many jobs end together their final log reads share those,
        where each would otherwise open and handshake a TLS connection of its own."""
        pool = self._pooled()
        if pool.direct() and not str(self._configuration.host).startswith("http://"):
            with contextlib.suppress(_NoHttp2):
                async with asyncio.timeout(self._timeout.total):
                    stream = await self._authorized(
                        lambda: self._connect(pool, path, query, self._timeout.total, http1=False),
                        describe_request("GET", path, query),
                    )
                    try:
                        return await stream.read()
                    finally:
                        stream.close()
        resp = await self._send("GET", path, query, None, "application/json", "*/*", self._timeout)
        async with resp:
            return await resp.read()

    @asynccontextmanager
    async def stream(
        self, path: str, *, query: Query | None = None, read_timeout: float | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A long-lived GET (watch, log follow): the open response, closed on exit."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeout.sock_connect, sock_read=read_timeout
        )
        resp = await self._send("GET", path, query, None, "application/json", "*/*", timeout)
        try:
            yield resp
        finally:
            resp.close()

    async def follow(
        self, path: str, *, query: Query | None = None, read_timeout: float | None = None
    ) -> LineReader:
        """A long-lived GET read as lines (a log follow), its answer's head read; ``close()`` it when done.

        Raises :class:`KubeApiError` on a non-2xx answer. Without a proxy: over TLS, a stream of an HTTP/2
        connection that the follows share (``multiplex.H2Stream``), else a :class:`LineStream` on its own
        connection; through a proxy, the session's response.
        """
        pool = self._pooled()
        if not pool.direct():
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self._timeout.sock_connect, sock_read=read_timeout
            )
            return ResponseLines(
                await self._send("GET", path, query, None, "application/json", "*/*", timeout)
            )
        return await self._authorized(
            lambda: self._connect(pool, path, query, read_timeout), describe_request("GET", path, query)
        )

    async def _connect(
        self, pool: _Pool, path: str, query: Query | None, read_timeout: float | None, *, http1: bool = True
    ) -> PushedLines:
        """Send the GET, read the answer's head (an error answer's body too): on a shared HTTP/2 connection
        over TLS if the server speaks it, else (unless not ``http1``: :class:`_NoHttp2`) on a connection of
        its own."""
        headers = await self._headers("*/*")
        url = self._url(path, query)
        parts = urlsplit(url)
        context = await pool.tls()
        host, port = parts.hostname or "", parts.port or (443 if context else 80)
        target = url[len(f"{parts.scheme}://{parts.netloc}") :] or "/"
        authority = parts.netloc.rpartition("@")[2]
        key = ConnectionKey(host, port, context is not None, context or False, None, None, None, None)
        server_name = self._configuration.tls_server_name or host
        answer: PushedLines | None = None
        if context is not None and not (pool.h2 is not None and pool.h2.refused):
            links = await pool.multiplexed()  # first: it imports the module (and h2) in a thread
            from airflow_provider_training.hooks.multiplex import H2Link, request_headers

            alpn_context = await pool.tls(ALPN)

            async def connect() -> H2Link:
                """A connection and, if the server chose ``h2``, its SETTINGS: both within the connect
                timeout, so a server that never settles fails the follows as one that never answers."""
                async with self._dialing(key, url):
                    loop = asyncio.get_running_loop()
                    _, link = await loop.create_connection(
                        H2Link, host, port, ssl=alpn_context, server_hostname=server_name
                    )
                    if link.protocol == "h2":
                        try:
                            await link.settled()
                        except BaseException:
                            link.close()
                            raise
                return link

            answer = await links.open(connect, request_headers(authority, target, headers), read_timeout)
        if answer is None and not http1:
            raise _NoHttp2
        if answer is None:
            lines = [f"GET {target} HTTP/1.1", f"Host: {authority}"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            request = ("\r\n".join([*lines, "Connection: close", "", ""])).encode()
            stream = LineStream(read_timeout)
            try:
                async with self._dialing(key, url):
                    await asyncio.get_running_loop().create_connection(lambda: stream, host, port)
                    if context is not None:
                        await stream.handshake(context, server_name)
                stream.send(request)
            except BaseException:
                stream.close()
                raise
            answer = stream
        try:
            await answer.head()
        except BaseException:
            answer.close()
            raise
        return answer

    @asynccontextmanager
    async def _dialing(self, key: ConnectionKey, url: str) -> AsyncIterator[None]:
        """Connecting (and the TLS handshake) within the connect timeout; its errors as aiohttp's."""
        try:
            async with asyncio.timeout(self._timeout.sock_connect):
                yield
        except TimeoutError as err:
            raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {url}") from err
        except ssl.CertificateError as err:
            raise aiohttp.ClientConnectorCertificateError(key, err) from err
        except ssl.SSLError as err:
            raise aiohttp.ClientConnectorSSLError(key, err) from err
        except OSError as err:
            raise aiohttp.ClientConnectorError(key, err) from err


class _NoHttp2(Exception):
    """The server does not speak HTTP/2 (or this is not TLS): the caller goes another way."""


async def iter_lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's lines as they arrive (without the newline), joining lines split across chunks."""
    reader = ResponseLines(resp)
    while (lines := await reader.lines()) is not None:
        for line in lines:
            yield line


def take_lines(body: bytearray) -> list[bytes]:
    """The complete lines at the start of ``body`` (without their newlines), removed from it: about
    :data:`LINES_PIECE` bytes of them at most (a backlog is handed on in pieces), one line at least."""
    cut = body.rfind(b"\n", 0, LINES_PIECE)
    if cut < 0:
        cut = body.find(b"\n")
        if cut < 0:
            return []
    lines = body[:cut].split(b"\n")
    del body[: cut + 1]
    return [bytes(line) for line in lines]


class LineReader:
    """The lines of a streamed body: :meth:`lines` gives the next complete ones as they arrive, the last
    line without a newline at the end, then ``None``. Subclasses hold ``_body`` (bytes not yet handed on) and
    say in :meth:`_more` whether more may come."""

    __slots__ = ()
    _body: bytearray

    async def lines(self) -> list[bytes] | None:
        while not (taken := take_lines(self._body)):
            if not await self._more():
                if not self._body:
                    return None
                taken = [bytes(self._body)]
                self._body.clear()
                break
        self._taken()
        return taken

    def ready(self) -> list[bytes] | None:
        """Without waiting: the complete lines received (the last line without a newline once the body
        ended), ``[]`` if none yet, ``None`` at the end; raises what interrupted it (after the lines before
        it). A reader that cannot tell the end without waiting says ``[]``: :meth:`lines` tells."""
        if taken := take_lines(self._body):
            self._taken()
            return taken
        return []

    def call_when_ready(self, listener: Callable[[], None]) -> bool:
        """Call ``listener()`` once, from the loop's callbacks, when :meth:`ready` may have something new
        (data, the end, an error); ``False`` if this reader cannot (then await :meth:`lines`)."""
        return False

    def _more(self) -> Awaitable[bool]:
        """Wait for more of the body; ``False`` once it has ended. Raises what interrupted it."""
        raise NotImplementedError

    def _taken(self) -> None:
        """Lines were handed on (room in the buffer again)."""

    def close(self) -> None:
        raise NotImplementedError


class ResponseLines(LineReader):
    """The lines of an aiohttp response (watches, and a log follow through a proxy)."""

    __slots__ = ("_body", "response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._body = bytearray()

    @property
    def status(self) -> int:
        return self.response.status

    def _more(self) -> Awaitable[bool]:
        return self._read()

    async def _read(self) -> bool:
        chunk = await self.response.content.readany()
        self._body += chunk
        return bool(chunk)

    def close(self) -> None:
        self.response.close()


class _Tls:
    """A client TLS session over memory buffers (``ssl.SSLObject``)."""

    __slots__ = ("incoming", "outgoing", "ready", "sslobj")

    def __init__(self, context: ssl.SSLContext, server_hostname: str) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.sslobj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_hostname)
        self.ready = False  # handshake done


_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _ENDED = range(8)


class PushedLines(LineReader):
    """The reader's side of an answer whose bytes are pushed to it (:meth:`_received_body`, :meth:`_fail`, the
    end): its status and headers, then the body's lines as :meth:`lines`, :meth:`ready` and
    :meth:`call_when_ready` hand them on. Shared by an HTTP/1.1 answer on its own connection
    (:class:`LineStream`) and an HTTP/2 stream on a shared one (``multiplex.H2Stream``).

    While the server sends nothing it holds two empty buffers, an idle timer and either the future its
    reader awaits (:meth:`lines`) or the one callback it was given (:meth:`call_when_ready`): a follower
    then needs no task of its own. The server's silence for ``read_timeout`` seconds raises
    ``ServerTimeoutError``, as aiohttp does, so retries and notes treat every path alike. Reading pauses
    (:meth:`_pause`) while more than :data:`LINES_BUFFER` bytes wait to be handed on, and resumes when half
    of them were.
    """

    __slots__ = (
        "_body",
        "_error",
        "_last",
        "_listener",
        "_paused",
        "_state",
        "_timeout",
        "_timer",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, read_timeout: float | None) -> None:
        self.status = 0
        self.headers: CIMultiDict[str] | None = None  # kept for an error answer only
        self._body = bytearray()  # the body's bytes not yet handed on as lines
        self._state = _HEAD
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._listener: Callable[[], None] | None = None
        self._timeout = read_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._paused = False

    # -- the pushing side ------------------------------------------------------------------------------------

    def _start_timer(self) -> None:
        if self._timeout is not None:
            loop = asyncio.get_running_loop()
            self._last = loop.time()
            self._timer = loop.call_at(self._last + self._timeout, self._check_idle)

    def _touch(self) -> None:
        """Something arrived: the idle timer starts again."""
        if self._timer is not None:
            self._last = asyncio.get_running_loop().time()

    def _got_head(self, status: int, headers: CIMultiDict[str]) -> None:
        self.status = status
        if not 200 <= status < 300:
            self.headers = headers

    def _after_data(self) -> None:
        """Pause if too much waits to be handed on; wake the reader."""
        if len(self._body) > LINES_BUFFER and not self._paused and self._pause():
            self._paused = True
        self._wake()

    def _ended(self) -> None:
        self._state = _ENDED
        self._stop_timer()
        self._wake()

    def _pause(self) -> bool:
        """Stop taking the body in; ``False`` if it cannot (closed)."""
        raise NotImplementedError

    def _resume(self) -> None:
        raise NotImplementedError

    def _shut(self) -> None:
        """Close what carries the answer (the reader is told by :meth:`_fail` or the end)."""
        raise NotImplementedError

    # -- the reader's side ---------------------------------------------------------------------------------

    async def head(self) -> None:
        """Wait for the answer's status and headers (an error answer's whole body too)."""
        while self._state == _HEAD or (not 200 <= self.status < 300 and self._state != _ENDED):
            await self._more()

    def _more(self) -> Awaitable[bool]:
        # A future, not a coroutine: a follow waiting for its pod's next line holds no frame of ours.
        if self._error is not None:
            raise self._error
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        if self._state == _ENDED:
            self._wake(False)
        return waiter

    def ready(self) -> list[bytes] | None:
        if taken := super().ready():
            return taken
        if self._error is not None:
            raise self._error
        if self._state != _ENDED:
            return []
        if not self._body:
            return None
        last = [bytes(self._body)]
        self._body.clear()
        return last

    async def read(self) -> bytes:
        """The rest of the body, whole, once it ended (for answers read whole, not as lines; an error
        answer's body, which :meth:`head` read)."""
        parts = []
        while True:
            if self._body:
                parts.append(bytes(self._body))
                self._body.clear()
                self._taken()
            if self._state == _ENDED and self._error is None:
                return b"".join(parts)
            await self._more()

    def call_when_ready(self, listener: Callable[[], None]) -> bool:
        self._listener = listener
        if self._error is not None or self._state == _ENDED or b"\n" in self._body:
            self._wake()  # already: called from the loop (call_soon), never from here
        return True

    def _taken(self) -> None:
        if self._paused and len(self._body) <= LINES_BUFFER // 2:
            self._paused = False
            self._resume()

    def _wake(self, more: bool = True) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(more)
        listener, self._listener = self._listener, None
        if listener is not None:
            asyncio.get_running_loop().call_soon(listener)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._stop_timer()
        self._shut()
        self._wake()

    def _check_idle(self) -> None:
        assert self._timeout is not None
        now = asyncio.get_running_loop().time()
        if self._paused or now - self._last < self._timeout:  # data came meanwhile, or we are not reading
            self._timer = asyncio.get_running_loop().call_at(
                max(now, self._last) + self._timeout, self._check_idle
            )
            return
        self._timer = None
        self._fail(aiohttp.ServerTimeoutError("Timeout on reading data from socket"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def release(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the answer (the body is not read further; a listener is not called)."""
        self._listener = None
        self._stop_timer()
        self._shut()


class LineStream(PushedLines, asyncio.Protocol):
    """One GET on its own connection, its HTTP/1.1 answer parsed as it arrives: the status and headers, then
    a chunked, sized or until-close body whose lines :meth:`lines` hands on.

    Beyond :class:`PushedLines` it holds its transport and socket, and over TLS its own TLS session. A
    connection lost mid-body and a bad answer raise the errors aiohttp raises for them
    (``ClientPayloadError``, ``ServerDisconnectedError``). Reading pauses by pausing the transport.
    """

    __slots__ = ("_left", "_raw", "_tls", "_transport")

    def __init__(self, read_timeout: float | None) -> None:
        super().__init__(read_timeout)
        self._transport: asyncio.Transport | None = None
        self._raw = bytearray()  # received, not yet parsed (the head, chunk sizes)
        self._left = 0  # bytes left of the current chunk, or of a sized body
        self._tls: _Tls | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, though not always an asyncio.Transport subclass: uvloop's TCPTransport (the
        # api-server's loop, where the Training tab follows logs) is not one.
        self._transport = cast(asyncio.Transport, transport)
        self._start_timer()

    def data_received(self, data: bytes) -> None:
        self._touch()
        tls = self._tls
        if tls is None:
            self._received(data)
        else:
            tls.incoming.write(data)
            try:
                if not tls.ready:
                    tls.sslobj.do_handshake()
                    tls.ready = True
                while plain := tls.sslobj.read(TLS_READ):
                    self._received(plain)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                pass  # a record's rest is to come; or the server's close_notify (its FIN follows)
            except ssl.SSLError as err:
                self._fail(err if not tls.ready else aiohttp.ClientPayloadError(f"TLS error: {err!r}"))
            self._flush_tls()
        self._after_data()

    def _pause(self) -> bool:
        if self._transport is None:
            return False
        self._transport.pause_reading()
        return True

    def _resume(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def _received(self, data: bytes) -> None:
        if self._state == _UNTIL_CLOSE or (
            self._state == _CHUNK_DATA and not self._raw and len(data) < self._left
        ):
            self._body += data  # the common case: a piece of a chunk, nothing to parse
            if self._state == _CHUNK_DATA:
                self._left -= len(data)
        else:
            self._raw += data
            try:
                self._parse()
            except (ValueError, IndexError) as err:
                self._fail(aiohttp.ClientPayloadError(f"Invalid HTTP answer: {err}"))

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._stop_timer()
        if self._state == _UNTIL_CLOSE:
            self._state = _ENDED
        elif self._state == _HEAD:
            self._fail(aiohttp.ServerDisconnectedError())
        elif self._state != _ENDED:
            cause = f": {exc!r}" if exc is not None else ""
            self._fail(aiohttp.ClientPayloadError(f"Response payload is not completed{cause}"))
        self._wake()

    # -- parsing --------------------------------------------------------------------------------------------

    def _parse(self) -> None:
        raw = self._raw
        while raw and self._state != _ENDED:
            state = self._state
            if state in (_CHUNK_DATA, _LENGTH):
                size = min(self._left, len(raw))
                self._body += raw[:size]
                del raw[:size]
                self._left -= size
                if not self._left:
                    self._state = _CHUNK_END if state == _CHUNK_DATA else _ENDED
            elif state == _UNTIL_CLOSE:
                self._body += raw
                raw.clear()
            elif state == _HEAD:
                end = raw.find(b"\r\n\r\n")
                if end < 0:
                    if len(raw) > MAX_HEAD:
                        raise ValueError("the response head is too long")
                    return
                head = bytes(raw[:end]).decode("latin-1")
                del raw[: end + 4]
                self._read_head(head)
            else:
                end = raw.find(b"\r\n")
                if end < 0:
                    if len(raw) > MAX_HEAD:
                        raise ValueError("a chunk size line is too long")
                    return
                line = bytes(raw[:end])
                del raw[: end + 2]
                if state == _CHUNK_SIZE:
                    self._left = int(line.split(b";", 1)[0].strip(), 16)
                    self._state = _CHUNK_DATA if self._left else _TRAILER
                elif state == _CHUNK_END:
                    if line:
                        raise ValueError("a chunk did not end with CRLF")
                    self._state = _CHUNK_SIZE
                elif not line:  # _TRAILER: an empty line ends the trailers and the body
                    self._state = _ENDED
        if self._state == _ENDED:
            self._stop_timer()

    def _read_head(self, head: str) -> None:
        status_line, *fields = head.split("\r\n")
        version, status, *_reason = status_line.split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x answer: {status_line[:80]!r}")
        code = int(status)
        if 100 <= code < 200:
            return  # an interim answer (100 Continue): the real head follows
        headers: CIMultiDict[str] = CIMultiDict()
        for field in fields:
            name, _, value = field.partition(":")
            headers.add(name.strip(), value.strip())
        self._got_head(code, headers)
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif code in (204, 304):
            self._state = _ENDED
        elif (length := headers.get("Content-Length")) is not None:
            self._left = int(length)
            self._state = _LENGTH if self._left else _ENDED
        else:
            self._state = _UNTIL_CLOSE

    async def handshake(self, context: ssl.SSLContext, server_hostname: str) -> None:
        """TLS over this connection, through memory buffers: asyncio's own TLS transport reads through a
        256 KiB buffer per connection (``sslproto.SSLProtocol.max_size``), twenty times what an idle
        follow holds otherwise."""
        tls = self._tls = _Tls(context, server_hostname)
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.sslobj.do_handshake()
        self._flush_tls()
        while not tls.ready:
            await self._more()

    def _flush_tls(self) -> None:
        if self._tls is not None and self._transport is not None and (out := self._tls.outgoing.read()):
            self._transport.write(out)

    def send(self, data: bytes) -> None:
        assert self._transport is not None
        if self._tls is None:
            self._transport.write(data)
        else:
            self._tls.sslobj.write(data)
            self._flush_tls()

    def _shut(self) -> None:
        if self._transport is not None:
            self._transport.close()


def encode_query(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as the API expects them: booleans lower-case, ``None`` dropped."""
    out = []
    for key, value in params.items():
        if value is None:
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


async def shared_ssl_context(configuration: ClusterConfig, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """The TLS context for ``configuration``'s CA, client certificate and verification settings, offering
    the ``alpn`` protocols (a context of its own: aiohttp's connections speak HTTP/1.1 only).

    Built in a worker thread the first time, then shared by every transport of the process with the same
    settings. Files are keyed with their modification times, so a rotated CA or client certificate gets a
    new context.
    """

    def build() -> ssl.SSLContext:
        context = configuration.ssl_context()
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context

    return await once_in_thread((*configuration.tls_key(), alpn), build)

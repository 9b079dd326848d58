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
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import aiohttp

from airflow_provider_training.hooks.errors import ApiRequest, KubeApiError
from airflow_provider_training.kinds.base import ResourceRef
from airflow_provider_training.offloop import once_in_thread

if TYPE_CHECKING:
    from airflow_provider_training.hooks.kubeconfig import ClusterConfig

Query = Iterable[tuple[str, str]]

MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "airflow-provider-training"
READ_BUFFER = 2**21  # as kubernetes_asyncio: watch events of large objects exceed aiohttp's default


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

    async def open(self) -> aiohttp.ClientSession:
        if self.session is None:
            cfg = self.configuration
            plain = str(cfg.host).startswith("http://")
            context: ssl.SSLContext | bool = False if plain else await shared_ssl_context(cfg)
            if self.session is None:  # another transport may have opened it meanwhile
                connector = aiohttp.TCPConnector(limit=0, ssl=context)
                self.session = aiohttp.ClientSession(
                    connector=connector, trust_env=True, read_bufsize=READ_BUFFER
                )
        return self.session

    async def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            if self.pools.get(id(self.configuration)) is self:
                del self.pools[id(self.configuration)]
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

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.release()

    async def _open(self) -> aiohttp.ClientSession:
        if self._pool is None:
            self._pool = _pool_for(self._configuration)
        return await self._pool.open()

    async def _send(self, *args: Any) -> aiohttp.ClientResponse:
        resp = await self._send_once(*args)
        if resp.status == 401 and self._reload_credentials is not None:
            resp.release()
            fresh = await self._reload_credentials()
            self._configuration.take_credentials(fresh)
            resp = await self._send_once(*args)
        return resp

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
        self.requests += 1
        cfg = self._configuration
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": USER_AGENT}
        headers.update(await cfg.auth_headers())  # exec plugins refresh their token first
        params = list(query or ())
        url = f"{cfg.host}{path}" + (f"?{urlencode(params)}" if params else "")
        return await session.request(
            method,
            url,
            headers=headers,
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
            _raise_for_status(resp, raw, describe_request(method, path, query))
        return json.loads(raw) if raw else {}

    async def read_bytes(self, path: str, *, query: Query | None = None) -> bytes:
        """One GET whose body is not JSON (pod logs), as raw bytes."""
        resp = await self._send("GET", path, query, None, "application/json", "*/*", self._timeout)
        async with resp:
            raw = await resp.read()
            _raise_for_status(resp, raw, describe_request("GET", path, query))
        return raw

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
            if not 200 <= resp.status < 300:
                _raise_for_status(resp, await resp.read(), describe_request("GET", path, query))
            yield resp
        finally:
            resp.close()


def _raise_for_status(resp: aiohttp.ClientResponse, raw: bytes, request: ApiRequest) -> None:
    if not 200 <= resp.status < 300:
        error = KubeApiError.from_response(resp.status, raw, resp.headers)
        error.request = request
        raise error


async def iter_lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's lines as they arrive (without the newline), joining lines split across chunks."""
    pending = bytearray()
    async for chunk in resp.content.iter_any():
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield bytes(pending[start:end])
            start = end + 1
        del pending[:start]
    if pending:
        yield bytes(pending)


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


async def shared_ssl_context(configuration: ClusterConfig) -> ssl.SSLContext:
    """The TLS context for ``configuration``'s CA, client certificate and verification settings.

    Built in a worker thread the first time, then shared by every transport of the process with the same
    settings. Files are keyed with their modification times, so a rotated CA or client certificate gets a
    new context.
    """
    return await once_in_thread(configuration.tls_key(), configuration.ssl_context)

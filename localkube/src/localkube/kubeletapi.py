"""The kubelet's HTTP API for pod logs, both ends of it.

- The node's end (`kubelet_app`, `serving_context`): what `localkube agent` serves over HTTPS with a
  self-signed certificate, `GET /containerLogs/{namespace}/{pod}/{container}` with the query of the API's
  pods/log (follow, tailLines, timestamps, previous, sinceSeconds, sinceTime, limitBytes), from its own
  `PodLogs`. Given a client CA, it authenticates and authorizes callers as a kubelet with
  `--anonymous-auth=false --authorization-mode=Webhook` does (`KubeletAuthorizer`).
- The API server's end (`kubelet_url`, `proxy_container_log`): localkube's server answers GET
  .../pods/{name}/log of a pod bound to a registered Node by proxying to that node's kubelet endpoint
  (`https://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>`), streaming with follow=true, as
  kube-apiserver does. Like kube-apiserver without `--kubelet-certificate-authority`, it does not verify the
  kubelet's certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from localkube.errors import ApiError
from localkube.podlogs import serve_pod_log
from localkube.resources import NODES, PODS

if TYPE_CHECKING:
    from localkube.api import ClusterApi
    from localkube.podlogs import PodLogs

log = logging.getLogger(__name__)
LOG_PATH = "/containerLogs/{namespace}/{pod}/{container}"


# -- the API server's end ----------------------------------------------------------------------------------
def kubelet_url(api: ClusterApi, pod: dict, local_node: str | None) -> str | None:
    """`https://host:port` of the kubelet of the node the pod is bound to, if that node is registered with an
    endpoint and is not `local_node` (the node of this process's own pod runtime); else None."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name or node_name == local_node:
        return None
    try:
        node = api.get(NODES, "", node_name)
    except ApiError:
        return None
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    host = addresses.get("InternalIP") or addresses.get("ExternalIP") or addresses.get("Hostname")
    if not port or not host:
        return None
    return f"https://{f'[{host}]' if ':' in host else host}:{int(port)}"


async def proxy_container_log(
    request: web.Request, base: str, pod: dict, container: str
) -> web.StreamResponse:
    """Relay the kubelet's answer to GET .../pods/{name}/log: its status and body, streamed as it comes."""
    meta = pod["metadata"]
    url = base + LOG_PATH.format(
        namespace=quote(meta["namespace"], safe=""),
        pod=quote(meta["name"], safe=""),
        container=quote(container, safe=""),
    )
    query = {k: v for k, v in request.query.items() if k != "container"}
    async with ClientSession(timeout=ClientTimeout(total=None, sock_connect=10)) as session:
        try:
            upstream = await session.get(url, params=query, ssl=False)
        except (ClientError, OSError) as exc:
            raise ApiError(500, "InternalError", f'Get "{url}": {exc}') from None
        async with upstream:
            content_type = upstream.headers.get("Content-Type", "text/plain; charset=utf-8")
            response = web.StreamResponse(status=upstream.status, headers={"Content-Type": content_type})
            response.enable_chunked_encoding()
            try:
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionError:  # the follower went away
                log.debug("localkube: the follower of %s went away", url)
            except ClientError as exc:  # the kubelet went away mid-stream: end the answer
                log.info("localkube: the kubelet's log stream %s broke: %s", url, exc)
            return response


# -- the node's end ----------------------------------------------------------------------------------------
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# How long a decision is kept: a kubelet's --authorization-webhook-cache-{authorized,unauthorized}-ttl.
ALLOWED_TTL, DENIED_TTL = 300.0, 30.0
Review = Callable[[dict], Awaitable[dict]]  # posts a SubjectAccessReview, returns the server's answer


class KubeletAuthorizer:
    """Who may call the kubelet endpoint: the user of a verified client certificate (CN the user, O its
    groups) whom the API server allows `<verb>` on `nodes/proxy` of this node (what a kubelet asks for every
    path but /stats, /metrics, /logs and /spec, /containerLogs included). Decisions are cached as a kubelet's
    webhook authorizer caches them. No certificate: 401; refused: 403, worded as a kubelet words them."""

    def __init__(self, node_name: str, review: Review) -> None:
        self.node_name, self.review = node_name, review
        self._cache: dict[tuple[str, tuple[str, ...], str], tuple[bool, float]] = {}

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        refused = await self.check(request)
        return refused if refused is not None else await handler(request)

    async def check(self, request: web.Request) -> web.Response | None:
        """None if the request may go on, else the answer that refuses it."""
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        if not peer:
            return web.Response(status=401, text="Unauthorized")
        user, groups = _identity(peer)
        verb = VERBS.get(request.method, request.method.lower())
        if await self._allowed(user, groups, verb):
            return None
        text = f"Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[proxy])"
        return web.Response(status=403, text=text)

    async def _allowed(self, user: str, groups: tuple[str, ...], verb: str) -> bool:
        key = (user, groups, verb)
        cached = self._cache.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": list(groups),
                "resourceAttributes": {
                    "verb": verb,
                    "resource": "nodes",
                    "subresource": "proxy",
                    "name": self.node_name,
                },
            },
        }
        try:
            answer = await self.review(review)
        except ApiError as exc:  # not cached: the next request asks again
            log.warning("localkube agent: a SubjectAccessReview failed: %s", exc)
            return False
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self._cache[key] = (allowed, time.monotonic() + (ALLOWED_TTL if allowed else DENIED_TTL))
        return allowed


def _identity(peer: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(user, groups) of a verified client certificate, as kube-apiserver reads one: CN and the O's."""
    attributes = [pair for rdn in peer.get("subject", ()) for pair in rdn]
    user = next((value for key, value in attributes if key == "commonName"), "")
    return user, tuple(value for key, value in attributes if key == "organizationName")


def kubelet_app(
    api: ClusterApi, logs: PodLogs, authorizer: KubeletAuthorizer | None = None
) -> web.Application:
    """The agent's kubelet endpoint: container logs of the pods it runs, errors as `kind: Status`; with an
    `authorizer`, only for the callers it lets through."""
    from localkube.server import error_response

    async def container_logs(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        try:
            pod = api.get(PODS, info["namespace"], info["pod"])
            return await serve_pod_log(request, pod, logs, info["container"])
        except ApiError as error:
            return error_response(error)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(middlewares=[authorizer.middleware] if authorizer is not None else [])
    app.router.add_get(LOG_PATH, container_logs)
    app.router.add_get("/healthz", healthz)
    return app


def self_signed(host: str, common_name: str) -> tuple[bytes, bytes]:
    """A fresh self-signed certificate for `host` (an IP address or a DNS name) and its key, both PEM: the
    certificate is what a client that verifies the server trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def serving_context(
    host: str,
    common_name: str,
    client_ca_file: str | Path | None = None,
    *,
    certificate: tuple[bytes, bytes] | None = None,
) -> ssl.SSLContext:
    """A TLS server context with a fresh self-signed certificate for `host` (an IP address or a DNS name), or
    `certificate` (PEM certificate and key, from :func:`self_signed`) when the caller needs to know it.
    With `client_ca_file`, a client certificate is asked for and, if one is sent, must be signed by that CA
    (a kubelet's --client-ca-file: Go's VerifyClientCertIfGiven)."""
    cert_pem, key_pem = certificate or self_signed(host, common_name)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="localkube-kubelet-") as tmp:
        cert_file, key_file = Path(tmp, "kubelet.crt"), Path(tmp, "kubelet.key")
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(cafile=str(client_ca_file))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context

"""The kubelet's HTTP API for pod logs, both ends of it.

- The node's end (`kubelet_app`, `serving_context`): what `localkube agent` serves over HTTPS with a
  self-signed certificate, `GET /containerLogs/{namespace}/{pod}/{container}` with the query of the API's
  pods/log (follow, tailLines, timestamps, previous, sinceSeconds, sinceTime, limitBytes), from its own
  `PodLogs`.
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
from pathlib import Path
from typing import TYPE_CHECKING
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
def kubelet_app(api: ClusterApi, logs: PodLogs) -> web.Application:
    """The agent's kubelet endpoint: container logs of the pods it runs, errors as `kind: Status`."""
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

    app = web.Application()
    app.router.add_get(LOG_PATH, container_logs)
    app.router.add_get("/healthz", healthz)
    return app


def serving_context(host: str, common_name: str) -> ssl.SSLContext:
    """A TLS server context with a fresh self-signed certificate for `host` (an IP address or a DNS name)."""
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
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="localkube-kubelet-") as tmp:
        cert_file, key_file = Path(tmp, "kubelet.crt"), Path(tmp, "kubelet.key")
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context.load_cert_chain(cert_file, key_file)
    return context

"""An HTTPS server for the kubeconfig tests (the fixture ``server``): a certificate signed by a CA made here,
client certificates optional; it records the credentials each request brought (the TLS client
certificate's subject and the Authorization header), answers 404 (a pod's log: two lines), and serves an
OIDC issuer under /idp."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LOG_CHUNKS = [b"tls one\ntls ", b"two\n"]


@dataclass
class Pki:
    folder: Path
    ca_pem: bytes
    ca_key: ec.EllipticCurvePrivateKey

    def issue(self, name: str, *, server: bool) -> tuple[Path, Path]:
        """A certificate for ``name`` signed by the CA: (certificate file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        ca = x509.load_pem_x509_certificate(self.ca_pem)
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if server:  # not 127.0.0.1: reached by that address, a client verifies kube.test (tls-server-name)
            names = [x509.DNSName("kube.test"), x509.DNSName("localhost")]
            names.append(x509.IPAddress(ipaddress.ip_address("::1")))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_file, key_file = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


def make_pki(folder: Path) -> Pki:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Pki(folder, cert.public_bytes(serialization.Encoding.PEM), key)


@dataclass
class TlsServer:
    url: str
    pki: Pki
    seen: list[dict[str, Any]] = field(default_factory=list)
    accepted_tokens: set[str] = field(default_factory=set)
    url6: str = ""  # the same server on [::1]
    paths: list[str] = field(default_factory=list)  # of the requests in ``seen``
    handshakes: list[str | None] = field(default_factory=list)  # the server name of each TLS handshake
    idp_forms: list[dict[str, str]] = field(default_factory=list)  # token requests to the OIDC issuer
    id_token: str = ""  # what the issuer (under /idp) hands out


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[TlsServer]:
    """HTTPS on 127.0.0.1 and [::1] with the names kube.test and localhost in its certificate (client
    certificates optional), and an OIDC issuer under /idp."""
    pki = make_pki(tmp_path)
    cert_file, key_file = pki.issue("apiserver", server=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=pki.ca_pem.decode())
    context.load_cert_chain(cert_file, key_file)
    context.verify_mode = ssl.CERT_OPTIONAL
    state = TlsServer("", pki)
    context.sni_callback = lambda _socket, name, _context: state.handshakes.append(name)

    async def handle(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        authorization = request.headers.get("Authorization", "")
        state.seen.append({"client": subject.get("commonName"), "authorization": authorization})
        state.paths.append(request.path)
        bearer = authorization.removeprefix("Bearer ")
        if state.accepted_tokens and bearer not in state.accepted_tokens:
            status = {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
            return web.json_response(status, status=401)
        if request.path.endswith("/log"):  # a pod's log: two lines in two chunks, then its end
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for piece in LOG_CHUNKS:
                await response.write(piece)
            await response.write_eof()
            return response
        # As kube-apiserver answers for a missing object of a served resource: the Status names it.
        name = request.path.rsplit("/", 1)[-1]
        status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
        return web.json_response({**status, "details": {"name": name}}, status=404)

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response({"issuer": f"{state.url}/idp", "token_endpoint": f"{state.url}/idp/token"})

    async def token(request: web.Request) -> web.Response:
        state.idp_forms.append(dict(await request.post()))  # type: ignore[arg-type]
        return web.json_response({"id_token": state.id_token, "refresh_token": "refresh-2"})

    app = web.Application()
    app.router.add_route("GET", "/idp/.well-known/openid-configuration", discovery)
    app.router.add_route("POST", "/idp/token", token)
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"https://localhost:{port}"
    site6 = web.TCPSite(runner, "::1", 0, ssl_context=context)
    await site6.start()
    state.url6 = f"https://[::1]:{site6._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield state
    finally:
        await runner.cleanup()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()

"""Credentials a kubeconfig user gets from elsewhere, as kubectl (client-go) gets them: an ``exec`` plugin's
output, or the ``oidc`` auth-provider's id-token, refreshed at its issuer.

A credential is kept until it expires (``expirationTimestamp``; an id-token's ``exp`` less 10 s) and then
fetched again; callers on one event loop share a fetch under way. A 401 gets a fresh one: the connection
builds the configuration again (see ``ClusterConfig.take_credentials``). A plugin runs as a subprocess of
the event loop (which it does not block), with no stdin (``interactive: false``), the kubeconfig's ``env``
on top of ours and ``KUBERNETES_EXEC_INFO``. Errors name the kubeconfig file, the user entry and the field.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from airflow_provider_training.hooks.errors import CredentialPluginError

OIDC_LEEWAY = timedelta(seconds=10)  # client-go refreshes an id-token this long before its exp


@dataclass(frozen=True)
class Credential:
    token: str | None = None
    cert: str | None = None  # client certificate and key, PEM
    key: str | None = None
    expires: datetime | None = None

    def expired(self) -> bool:
        return self.expires is not None and datetime.now(UTC) > self.expires


class CredentialSource:
    """A credential fetched on demand and kept until it expires."""

    def __init__(self, where: str) -> None:
        self.where = where  # "the kubeconfig F: user 'u'", for errors
        self.current: Credential | None = None
        self._unused = False  # fetched by prepare() and not used since
        self._fetches: dict[int, asyncio.Task[Credential]] = {}

    async def credential(self) -> Credential:
        """The credential, kept until it expires."""
        if self.current is not None and (self._unused or not self.current.expired()):
            self._unused = False
            return self.current
        loop = asyncio.get_running_loop()
        fetch = self._fetches.get(id(loop))
        if fetch is None:
            fetch = self._fetches[id(loop)] = loop.create_task(self._fetch())

            def done(task: asyncio.Task[Credential]) -> None:
                self._fetches.pop(id(loop), None)
                if not task.cancelled():
                    task.exception()  # seen, even when every caller was cancelled meanwhile

            fetch.add_done_callback(done)
        self.current, self._unused = await asyncio.shield(fetch), False
        return self.current

    async def prepare(self) -> None:
        """Fetch now (a client certificate is part of the TLS setup): the next use takes it, even expired."""
        await self.credential()
        self._unused = True

    async def _fetch(self) -> Credential:
        raise NotImplementedError

    def error(self, field: str, problem: str) -> CredentialPluginError:
        return CredentialPluginError(f"{self.where}: {field}: {problem}")


class ExecPlugin(CredentialSource):
    """``user.exec``: the command's ``ExecCredential`` (client.authentication.k8s.io v1 or v1beta1)."""

    def __init__(
        self,
        where: str,
        api_version: str,
        command: str,
        args: list[str],
        env: dict[str, str],
        cluster: dict[str, Any] | None,
        install_hint: str = "",
    ) -> None:
        super().__init__(where)
        self.api_version, self.command, self.args, self.env = api_version, command, args, env
        self.install_hint = install_hint
        spec: dict[str, Any] = {"interactive": False, **({"cluster": cluster} if cluster else {})}
        self.info = json.dumps({"kind": "ExecCredential", "apiVersion": api_version, "spec": spec})

    async def _fetch(self) -> Credential:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self.info}
        pipe = asyncio.subprocess.PIPE
        try:
            process = await asyncio.create_subprocess_exec(
                self.command, *self.args, stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, env=env
            )
        except OSError as err:
            hint = f" ({self.install_hint.strip()})" if self.install_hint else ""
            raise self.error(
                "exec.command", f"executable {self.command} not found: {err.strerror}{hint}"
            ) from None
        out, errors = await process.communicate()
        if process.returncode:
            tail = errors.decode(errors="replace").strip()[-1000:]
            failed = f"executable {self.command} failed with exit code {process.returncode}"
            raise self.error("exec.command", failed + (f": {tail}" if tail else ""))
        return self._parse(out)

    def _parse(self, out: bytes) -> Credential:
        field = "exec (the plugin's output)"
        try:
            doc = yaml.safe_load(out)  # JSON or YAML, as client-go
        except yaml.YAMLError:
            doc = None
        if not isinstance(doc, dict):
            raise self.error(field, "not an ExecCredential in JSON or YAML")
        if doc.get("apiVersion") != self.api_version:
            returned = doc.get("apiVersion")
            raise self.error(field, f"plugin returned version {returned}, configured for {self.api_version}")
        status = doc.get("status")
        if not isinstance(status, dict):
            raise self.error(field, "the plugin didn't return a status field")
        token, cert, key = (status.get(k) for k in ("token", "clientCertificateData", "clientKeyData"))
        if bool(cert) != bool(key):
            raise self.error(field, "the plugin returned only a certificate or a key, not both")
        if not (token or cert):
            raise self.error(
                field, "the plugin didn't return a token or a clientCertificateData/clientKeyData pair"
            )
        expires = status.get("expirationTimestamp")
        try:
            if isinstance(expires, str):
                expires = datetime.fromisoformat(expires.replace("Z", "+00:00"))
            if (
                isinstance(expires, datetime) and expires.tzinfo is None
            ):  # YAML's timestamps come naive, in UTC
                expires = expires.replace(tzinfo=UTC)
        except ValueError:
            raise self.error(field, f"expirationTimestamp {expires!r} is not an RFC 3339 time") from None
        return Credential(token or None, cert or None, key or None, expires or None)


class OidcProvider(CredentialSource):
    """``auth-provider: {name: oidc}``: the ``id-token``, refreshed with the ``refresh-token`` at the token
    endpoint of ``idp-issuer-url``'s discovery document once its ``exp`` is near. The new tokens are kept in
    memory (kubectl writes them back into the kubeconfig file)."""

    def __init__(self, where: str, config: dict[str, str], ca_data: str | None) -> None:
        super().__init__(where)
        self.issuer, self.client_id = config["idp-issuer-url"], config["client-id"]
        self.client_secret, self.refresh_token = config.get("client-secret"), config.get("refresh-token")
        self.ca_file, self.ca_data = config.get("idp-certificate-authority"), ca_data
        if config.get("id-token"):
            self.current = self._tokens(config["id-token"])

    @staticmethod
    def _tokens(id_token: str) -> Credential:
        try:
            payload = id_token.split(".")[1]
            exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
            expires = datetime.fromtimestamp(float(exp), UTC) - OIDC_LEEWAY
        except (IndexError, ValueError, KeyError, TypeError):
            expires = datetime.fromtimestamp(0, UTC)  # unreadable: refresh it, as client-go
        return Credential(token=id_token, expires=expires)

    async def _fetch(self) -> Credential:
        import httpx

        if not self.refresh_token:
            raise self.error("auth-provider.config.refresh-token", "the id-token has expired and none is set")
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self.refresh_token,
            "client_id": self.client_id,
        }
        if self.client_secret:
            form["client_secret"] = self.client_secret
        try:
            tls = await asyncio.to_thread(
                ssl.create_default_context, cafile=self.ca_file, cadata=self.ca_data
            )
            async with httpx.AsyncClient(verify=tls, timeout=30.0) as client:
                found = await client.get(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
                answer = await client.post(found.raise_for_status().json()["token_endpoint"], data=form)
                tokens = answer.raise_for_status().json()
        except (httpx.HTTPError, OSError, ValueError, KeyError, TypeError) as err:
            problem = f"refreshing the id-token at {self.issuer} failed: {err}"
            raise self.error("auth-provider.config.idp-issuer-url", problem) from None
        if not isinstance(tokens, dict) or not tokens.get("id_token"):
            raise self.error("auth-provider.config.idp-issuer-url", "the token response has no id_token")
        self.refresh_token = tokens.get("refresh_token") or self.refresh_token
        return self._tokens(str(tokens["id_token"]))

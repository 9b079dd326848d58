"""Credentials a kubeconfig user gets from elsewhere, as kubectl (client-go) gets them: an ``exec`` plugin's
``ExecCredential``, or the ``oidc`` auth-provider's id-token, refreshed at its issuer.

A credential is kept until it expires (``expirationTimestamp``; an id-token's ``exp`` less 10 s), then
fetched again; a 401 gets a fresh one (the connection builds the configuration again). A plugin runs as a
subprocess of the event loop, which it does not block, without stdin (``interactive: false``), with the
kubeconfig's ``env`` on top of ours and ``KUBERNETES_EXEC_INFO``. Errors name the file, user and field.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import yaml

from airflow_provider_training.hooks.errors import CredentialPluginError

T = TypeVar("T")
_flights: dict[tuple[int, Hashable], asyncio.Task[Any]] = {}


async def shared_flight(key: Hashable, start: Callable[[], Awaitable[T]]) -> T:
    """``start()``'s result; callers on one loop asking while one of ``key`` is under way share it, and a
    caller cancelled meanwhile cancels it for nobody (a failure nobody awaits still counts as seen)."""
    loop = asyncio.get_running_loop()
    full = (id(loop), key)
    task = _flights.get(full)
    if task is None:
        task = _flights[full] = loop.create_task(start())  # type: ignore[arg-type]

        def done(task: asyncio.Task[Any]) -> None:
            _flights.pop(full, None)
            if not task.cancelled():
                task.exception()

        task.add_done_callback(done)
    return await asyncio.shield(task)


@dataclass(frozen=True)
class Credential:
    token: str | None = None
    cert: str | None = None  # the client certificate and its key, PEM
    key: str | None = None
    expires: datetime | None = None


class CredentialSource:
    """A credential fetched on demand and kept until it expires."""

    def __init__(self, where: str) -> None:
        self.where = where  # "the kubeconfig F: user 'u'"
        self.current: Credential | None = None
        self._unused = False  # fetched by prepare() and not used since

    async def credential(self) -> Credential:
        current = self.current
        if current is not None and (
            self._unused or not current.expires or datetime.now(UTC) <= current.expires
        ):
            self._unused = False
            return current
        self.current, self._unused = await shared_flight(("credential", id(self)), self._fetch), False
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

    def __init__(self, where: str, spec: dict[str, Any], cluster: dict[str, Any] | None) -> None:
        super().__init__(where)
        self.version, self.command, self.args = spec["apiVersion"], spec["command"], spec["args"]
        self.env, self.hint = spec["env"], spec["installHint"]
        info = {"interactive": False, **({"cluster": cluster} if cluster else {})}
        self.info = json.dumps({"kind": "ExecCredential", "apiVersion": self.version, "spec": info})

    async def _fetch(self) -> Credential:
        env, pipe = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self.info}, asyncio.subprocess.PIPE
        try:
            run = await asyncio.create_subprocess_exec(
                self.command, *self.args, stdin=asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe, env=env
            )
        except OSError as err:
            hint = f" ({self.hint})" if self.hint else ""
            raise self.error(
                "exec.command", f"executable {self.command} not found: {err.strerror}{hint}"
            ) from None
        out, said = await run.communicate()
        if run.returncode:
            tail = said.decode(errors="replace").strip()[-1000:]
            failed = f"executable {self.command} failed with exit code {run.returncode}"
            raise self.error("exec.command", failed + (f": {tail}" if tail else ""))
        return self._parse(out)

    def _parse(self, out: bytes) -> Credential:
        def wrong(problem: str) -> CredentialPluginError:
            return self.error("exec (the plugin's output)", problem)

        try:
            doc = yaml.safe_load(out)  # JSON or YAML, as client-go
        except yaml.YAMLError:
            doc = None
        if not isinstance(doc, dict):
            raise wrong("not an ExecCredential in JSON or YAML")
        if doc.get("apiVersion") != self.version:
            raise wrong(f"plugin returned version {doc.get('apiVersion')}, configured for {self.version}")
        status = doc.get("status")
        if not isinstance(status, dict):
            raise wrong("the plugin didn't return a status field")
        token, cert, key = (status.get(k) for k in ("token", "clientCertificateData", "clientKeyData"))
        if bool(cert) != bool(key):
            raise wrong("the plugin returned only a certificate or a key, not both")
        if not (token or cert):
            raise wrong("the plugin returned no token and no clientCertificateData/clientKeyData")
        expires = status.get("expirationTimestamp")
        try:
            if isinstance(expires, str):
                expires = datetime.fromisoformat(expires.replace("Z", "+00:00"))
            if isinstance(expires, datetime) and expires.tzinfo is None:  # YAML's: naive, in UTC
                expires = expires.replace(tzinfo=UTC)
        except ValueError:
            raise wrong(f"expirationTimestamp {expires!r} is not an RFC 3339 time") from None
        return Credential(token or None, cert or None, key or None, expires or None)


class OidcProvider(CredentialSource):
    """``auth-provider: {name: oidc}``: the ``id-token``, refreshed with the ``refresh-token`` at the token
    endpoint of ``idp-issuer-url``'s discovery document once its ``exp`` is 10 s away. The new tokens stay in
    memory (kubectl writes them back into the kubeconfig)."""

    def __init__(self, where: str, config: dict[str, str], ca_data: str | None) -> None:
        super().__init__(where)
        self.config, self.ca_data = config, ca_data
        self.refresh_token = config.get("refresh-token")
        if config.get("id-token"):
            self.current = self._expiring(config["id-token"])

    @staticmethod
    def _expiring(id_token: str) -> Credential:
        try:
            claims = id_token.split(".")[1]
            exp = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"]
            expires = datetime.fromtimestamp(float(exp), UTC) - timedelta(seconds=10)
        except (IndexError, ValueError, KeyError, TypeError):
            expires = datetime.fromtimestamp(0, UTC)  # unreadable: refreshed, as client-go does
        return Credential(token=id_token, expires=expires)

    async def _fetch(self) -> Credential:
        import httpx

        field, issuer = "auth-provider.config.idp-issuer-url", self.config["idp-issuer-url"]
        if not self.refresh_token:
            raise self.error("auth-provider.config.refresh-token", "the id-token has expired and none is set")
        form = {"grant_type": "refresh_token", "refresh_token": self.refresh_token}
        form |= {"client_id": self.config["client-id"]}
        if self.config.get("client-secret"):
            form["client_secret"] = self.config["client-secret"]
        ca = {"cafile": self.config.get("idp-certificate-authority"), "cadata": self.ca_data}
        try:
            tls = await asyncio.to_thread(ssl.create_default_context, **ca)  # type: ignore[arg-type]
            async with httpx.AsyncClient(verify=tls, timeout=30.0) as client:
                found = await client.get(issuer.rstrip("/") + "/.well-known/openid-configuration")
                answer = await client.post(found.raise_for_status().json()["token_endpoint"], data=form)
                tokens = answer.raise_for_status().json()
            self.refresh_token = tokens.get("refresh_token") or self.refresh_token
            return self._expiring(str(tokens["id_token"]))
        except (httpx.HTTPError, OSError, ValueError, LookupError, TypeError, AttributeError) as err:
            raise self.error(field, f"refreshing the id-token at {issuer} failed: {err!r}") from None

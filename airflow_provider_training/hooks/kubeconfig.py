"""Cluster credentials from a kubeconfig or a pod's service account, read as kubectl (client-go) reads them,
without a Kubernetes client (importing one costs a cold process seconds).

``KUBECONFIG`` lists files merged first-wins (a name, ``current-context``); each entry's relative paths
resolve against the folder of the file that defined it; ``*-data`` fields are padded standard base64, line
breaks allowed; booleans are YAML booleans. What kubectl refuses in the chosen context's cluster and user is
refused, naming the file, the entry and the field. Users authenticate with a ``token``, a ``tokenFile``
(re-read every minute: it rotates), basic auth, a client certificate, an ``exec`` plugin or the ``oidc``
auth-provider (:mod:`.credentials`), in kubectl's precedence.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from airflow_provider_training.hooks.credentials import Credential, CredentialSource, ExecPlugin, OidcProvider
from airflow_provider_training.server_clock import ServerClock

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0  # as client-go: projected service-account tokens rotate
EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_EXTENSION = "client.authentication.k8s.io/exec"  # a cluster's extension handed to its exec plugin
_ORIGIN = "\0origin"  # a merged entry's (file label, folder), for errors and relative paths
_CLUSTER_FLAGS = ("insecure-skip-tls-verify", "disable-compression")  # booleans to kubectl


class KubeconfigError(ValueError):
    """The kubeconfig (or the in-cluster environment) does not name a usable cluster and user."""


class TokenFile(CredentialSource):
    """A bearer token in a rotated file (``tokenFile``, a service account's): read again every minute."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the token file {path}")
        self.path = path

    async def _fetch(self) -> Credential:
        try:
            token = Path(self.path).read_text().strip()
        except OSError as err:
            raise KubeconfigError(f"cannot read the token file {self.path}: {err.strerror}") from None
        return Credential(token, expires=datetime.now(UTC) + timedelta(seconds=TOKEN_REREAD_SECONDS))


@dataclass(repr=False)  # no credentials in logs
class ClusterConfig:
    """Where the API server is and how to authenticate and verify it: what the transport needs, no more.

    ``await auth_headers()`` first: an exec plugin whose credential expired runs again there, and a client
    certificate it returns changes ``tls_key()`` and what ``ssl_context()`` loads."""

    host: str
    token: str | None = None
    basic_auth: str | None = None  # "user:password"
    ca_file: str | None = None
    ca_data: str | None = None  # PEM text, as the *_data below
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: str | None = None
    key_data: str | None = None
    verify_ssl: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None  # http://, https:// or socks5://
    plugin: CredentialSource | None = None  # a token file, an exec plugin or the oidc auth-provider
    clock: ServerClock = field(default_factory=ServerClock, compare=False)  # of every transport on this

    async def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for the next request (empty without credentials)."""
        if self.plugin is not None and (token := (await self.plugin.credential()).token):
            return {"Authorization": f"Bearer {token}"}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic_auth:
            return {"Authorization": "Basic " + base64.b64encode(self.basic_auth.encode()).decode()}
        return {}

    def take_credentials(self, fresh: ClusterConfig) -> None:
        """After a 401: adopt the credentials of a configuration loaded again (a token file to read again,
        an exec plugin that has run again)."""
        self.token, self.basic_auth, self.plugin = fresh.token, fresh.basic_auth, fresh.plugin

    def _client_pem(self) -> tuple[str | None, str | None]:
        """The client certificate and key as PEM text: an exec plugin's, else the kubeconfig's data."""
        given = self.plugin.current if self.plugin is not None else None
        return (
            (given.cert, given.key) if given is not None and given.cert else (self.cert_data, self.key_data)
        )

    def tls_key(self) -> tuple[Any, ...]:
        """What the TLS context depends on (files with their versions, the client certificate's digest),
        for sharing one per process: it changes when any of them does."""
        files, pem = (self.ca_file, self.cert_file, self.key_file), "".join(filter(None, self._client_pem()))
        digest = hashlib.sha256(pem.encode()).hexdigest() if pem else None
        return (
            *files,
            *map(file_version, files),
            self.ca_data,
            digest,
            self.verify_ssl,
            self.tls_server_name,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context: the cluster's CA (else the system's), the client certificate, verification."""
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        cert, key = self._client_pem()
        cert = cert or (Path(self.cert_file).read_text() if self.cert_file else None)
        key = key or (Path(self.key_file).read_text() if self.key_file else None)
        if cert and key:  # ssl loads certificates from files only: a private one, removed once loaded
            handle, path = tempfile.mkstemp(prefix="training-client-")  # mode 0600
            try:
                with os.fdopen(handle, "w") as out:
                    out.write(f"{cert.strip()}\n{key.strip()}\n")
                context.load_cert_chain(path)
            finally:
                os.unlink(path)
        if not self.verify_ssl:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context


def file_version(path: str | None) -> int | None:
    """A file's modification time (ns), for cache keys; ``None`` without a file (its reader reports that)."""
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def in_cluster_config() -> ClusterConfig:
    """The pod's service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, its token and CA files."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not running in a pod: KUBERNETES_SERVICE_HOST and _PORT are not set")
    token_path, ca_path = SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt"
    if not token_path.is_file() or not ca_path.is_file():
        raise KubeconfigError(f"the service account files are missing under {SERVICE_ACCOUNT}")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return ClusterConfig(f"https://{host}:{port}", ca_file=str(ca_path), plugin=TokenFile(str(token_path)))


def in_a_pod() -> bool:
    """Whether the process runs in a pod with a service account (what default credentials use first)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").is_file()


def in_cluster_namespace() -> str | None:
    """The pod's namespace, from its service account's ``namespace`` file (as KubernetesPodOperator)."""
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text().strip() or None
    except OSError:
        return None


def read_kubeconfig_files(paths: str) -> dict[str, Any]:
    """The kubeconfig of ``paths`` (``os.pathsep``-separated, as ``KUBECONFIG``), merged; as kubectl, a
    missing file in a list is skipped."""
    files = list(dict.fromkeys(p for p in paths.split(os.pathsep) if p))
    merged: dict[str, Any] = {_ORIGIN: f"the kubeconfig {paths}"}
    for path in files:
        file = Path(path).expanduser()
        try:
            text = file.read_text()
        except OSError as err:
            if len(files) > 1 and not file.exists():
                continue
            raise KubeconfigError(f"cannot read the kubeconfig {path}: {err.strerror}") from None
        try:  # the parser's own message may quote a line holding a token: name the file only
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            raise KubeconfigError(f"the kubeconfig {path} is not valid YAML") from None
        if not isinstance(loaded, Mapping):
            raise KubeconfigError(f"the kubeconfig {path} is not a mapping")
        _merge(merged, loaded, f"the kubeconfig {path}", os.path.dirname(os.path.abspath(file)))
    return merged


def read_kubeconfig_dict(kubeconfig: Mapping[str, Any], base_dir: str) -> dict[str, Any]:
    """A kubeconfig mapping (the connection's ``kube_config``), its relative paths in ``base_dir``."""
    merged: dict[str, Any] = {_ORIGIN: "the connection's kube_config"}
    _merge(merged, kubeconfig, "the connection's kube_config", base_dir)
    return merged


def _merge(into: dict[str, Any], more: Mapping[str, Any], source: str, folder: str) -> None:
    """Merge as kubectl does: the first file to set ``current-context`` or define a name wins, whole. Each
    entry keeps where it came from. A wrong type anywhere in ``more`` refuses it (as kubectl the file)."""
    if "current-context" not in into and more.get("current-context"):
        into["current-context"] = more["current-context"]
    for section in ("clusters", "users", "contexts"):
        known, names = {entry[0] for entry in _entries(into, section)}, []
        for name, where, inner, _ in _entries({section: more.get(section)}, section, (source, folder)):
            if name in names:
                raise KubeconfigError(f"{source}: {section}: duplicate name {name!r}")
            names.append(name)
            for key in _CLUSTER_FLAGS if section == "clusters" else ():
                _flag(inner, key, where)
            if isinstance(inner.get("exec"), Mapping):
                _flag(inner["exec"], "provideClusterInfo", where, "exec.")
            if name not in known:
                into.setdefault(section, []).append(
                    {"name": name, section[:-1]: inner, _ORIGIN: (source, folder)}
                )


def _flag(entry: Mapping[str, Any], key: str, where: str, prefix: str = "") -> bool:
    """A kubeconfig boolean: a YAML boolean, or nothing (false). A quoted ``"false"``, true in Python, is
    refused as kubectl refuses it; YAML 1.1's ``y``/``n`` (strings to PyYAML) are the booleans they are."""
    value = entry.get(key)
    if value is None or isinstance(value, bool) or value in ("y", "Y", "n", "N"):
        return value in (True, "y", "Y")
    kind = "string" if isinstance(value, str) else type(value).__name__
    raise KubeconfigError(
        f"{where}: {prefix}{key} must be a boolean (true or false, unquoted), not the {kind} {value!r}"
    )


def cluster_config(kubeconfig: Mapping[str, Any], context: str | None) -> ClusterConfig:
    """The cluster and credentials of ``context`` (else the current context) in a merged kubeconfig, after
    kubectl's checks of that cluster and user."""
    if not (context := context or kubeconfig.get("current-context")):
        origin = kubeconfig.get(_ORIGIN)
        raise KubeconfigError(
            f"{origin}: current-context is not set and no context was given (cluster_context)"
        )
    _, chosen, _ = _entry(kubeconfig, "contexts", context, required=True)
    where, cluster, folder = _entry(kubeconfig, "clusters", chosen.get("cluster"), required=True)
    if not (server := str(cluster.get("server") or "").rstrip("/")):
        raise KubeconfigError(f"{where}: server is not set")
    insecure = _flag(cluster, "insecure-skip-tls-verify", where)
    ca_file, ca_data = _source(cluster, "certificate-authority", where, folder)
    if insecure and (ca_file or ca_data):
        ca = "certificate-authority" + ("" if ca_file else "-data")
        raise KubeconfigError(
            f"{where}: insecure-skip-tls-verify is true and {ca} is set: specifying a root certificates file "
            "with the insecure flag is not allowed (kubectl refuses it too); keep one"
        )
    proxy = cluster.get("proxy-url") or None
    if proxy is not None and urlsplit(str(proxy)).scheme.lower() not in ("http", "https", "socks5"):
        raise KubeconfigError(f"{where}: proxy-url must be an http://, https:// or socks5:// URL")
    cfg = ClusterConfig(server, ca_file=ca_file, ca_data=ca_data, verify_ssl=not insecure, proxy=proxy)
    cfg.tls_server_name = cluster.get("tls-server-name") or None
    where, user, folder = _entry(kubeconfig, "users", chosen.get("user"), required=False)
    cfg.cert_file, cfg.cert_data = _source(user, "client-certificate", where, folder)
    cfg.key_file, cfg.key_data = _source(user, "client-key", where, folder)
    for has, lacks in (("client-certificate", "client-key"), ("client-key", "client-certificate")):
        if (user.get(has) or user.get(f"{has}-data")) and not (user.get(lacks) or user.get(f"{lacks}-data")):
            given = has if user.get(has) else f"{has}-data"
            raise KubeconfigError(f"{where}: {given} is set without {lacks} or {lacks}-data")
    # kubectl's precedence: a token file over a token; any static credential and the exec plugin never runs;
    # a token (or basic auth) and the auth-provider is not used.
    cfg.token = str(user["token"]) if user.get("token") else None
    if token_file := _source(user, "tokenFile", where, folder)[0]:
        cfg.plugin = TokenFile(token_file)
    if (username := user.get("username")) and (cfg.token or token_file):
        raise KubeconfigError(f"{where}: token (or tokenFile) and username are both set: set one")
    cfg.basic_auth = f"{username}:{user.get('password') or ''}" if username else None
    if user.get("exec") and user.get("auth-provider"):
        raise KubeconfigError(f"{where}: exec and auth-provider are both set: set only one of them")
    if user.get("exec") and not (cfg.token or token_file or username or cfg.cert_file or cfg.cert_data):
        cfg.plugin = _exec_plugin(user["exec"], where, folder, cfg, cluster)
    if user.get("auth-provider") and not (cfg.token or token_file or username):
        cfg.plugin = _oidc(user["auth-provider"], where)
    return cfg


def _exec_plugin(spec: Any, where: str, folder: str, cfg: ClusterConfig, cluster: Mapping) -> ExecPlugin:
    """``user.exec``, checked as kubectl checks it; a ``command`` with a path separator is the kubeconfig
    folder's (a bare name is looked up on ``PATH``)."""
    if not isinstance(spec, Mapping) or not spec.get("command"):
        raise KubeconfigError(f"{where}: exec.command is not set")
    if (version := spec.get("apiVersion")) not in EXEC_VERSIONS:
        raise KubeconfigError(f"{where}: exec.apiVersion {version!r} is not one of {EXEC_VERSIONS}")
    mode = spec.get("interactiveMode") or ("" if version.endswith("/v1") else "IfAvailable")
    if mode not in ("Never", "IfAvailable"):  # Always needs a terminal, which the provider has not
        raise KubeconfigError(f"{where}: exec.interactiveMode {mode!r} is not Never or IfAvailable")
    env = spec.get("env") or []
    if not all(isinstance(item, Mapping) and item.get("name") for item in env):
        raise KubeconfigError(f"{where}: exec.env: every entry needs a name")
    command = str(spec["command"])
    info = None
    if _flag(spec, "provideClusterInfo", where, "exec."):
        ca = cfg.ca_data or (Path(cfg.ca_file).read_text() if cfg.ca_file else "")
        extensions = [e for e in cluster.get("extensions") or [] if isinstance(e, Mapping)]
        info = {
            "server": cfg.host,
            "tls-server-name": cfg.tls_server_name,
            "insecure-skip-tls-verify": not cfg.verify_ssl,
            "certificate-authority-data": base64.b64encode(ca.encode()).decode() if ca else None,
            "proxy-url": cfg.proxy,
            "disable-compression": _flag(cluster, "disable-compression", where),
            "config": next((e.get("extension") for e in extensions if e.get("name") == EXEC_EXTENSION), None),
        }
        info = {key: value for key, value in info.items() if value or key == "server"}
    return ExecPlugin(
        where,
        {
            "apiVersion": version,
            "command": os.path.normpath(os.path.join(folder, command))
            if os.sep in command or "/" in command
            else command,
            "args": [str(arg) for arg in spec.get("args") or []],
            "env": {str(item["name"]): str(item.get("value") or "") for item in env},
            "installHint": str(spec.get("installHint") or "").strip(),
        },
        info,
    )


def _oidc(provider: Any, where: str) -> OidcProvider:
    """``user.auth-provider``: only ``oidc`` (kubectl's ``gcp`` and ``azure`` are stubs that fail)."""
    name = provider.get("name") if isinstance(provider, Mapping) else None
    if name != "oidc":
        raise KubeconfigError(f"{where}: auth-provider.name {name!r}: only oidc is supported (as kubectl)")
    config = {str(key): str(value) for key, value in (provider.get("config") or {}).items()}
    for key in ("idp-issuer-url", "client-id"):
        if not config.get(key):
            raise KubeconfigError(f"{where}: auth-provider.config.{key} is not set")
    ca = _source(config, "idp-certificate-authority", f"{where}: auth-provider.config", "")  # as given
    return OidcProvider(where, config, ca[1])


def _entry(kubeconfig: Mapping, section: str, name: Any, *, required: bool) -> tuple[str, Mapping, str]:
    """Where the named entry of ``section`` is (its file and name), its mapping and its file's folder."""
    found = [entry[1:] for entry in _entries(kubeconfig, section) if entry[0] == name]
    if found or not required:
        return found[0] if found else ("", {}, "")
    names = [entry[0] for entry in _entries(kubeconfig, section)]
    raise KubeconfigError(f"{kubeconfig.get(_ORIGIN)} has no {section[:-1]} named {name!r} (it has {names})")


def _entries(kubeconfig: Mapping, section: str, origin: Any = None) -> list[tuple[Any, str, Mapping, str]]:
    """The name, place (file and name), ``context``/``cluster``/``user`` mapping and folder of each entry."""
    found = []
    for entry in kubeconfig.get(section) or []:
        if isinstance(entry, Mapping):
            source, folder = entry.get(_ORIGIN, origin)
            inner = entry.get(section[:-1])
            where = f"{source}: {section[:-1]} {entry.get('name')!r}"
            found.append((entry.get("name"), where, inner if isinstance(inner, Mapping) else {}, folder))
    return found


def _source(entry: Mapping[str, Any], key: str, where: str, folder: str) -> tuple[str | None, str | None]:
    """``entry[key]``, a readable file relative to ``folder``, or ``entry[key-data]``: padded standard base64
    whose line breaks are ignored (Go's decoder), decoded; not both."""
    path, data = entry.get(key), entry.get(f"{key}-data")
    if path and data:
        raise KubeconfigError(f"{where}: {key} and {key}-data are both set: set only one of them")
    if path:
        path = os.path.normpath(os.path.join(folder, str(path)))  # as Go's filepath.Join
        try:
            with open(path, "rb"):
                return path, None
        except OSError as err:
            raise KubeconfigError(f"{where}: cannot read {key} {path}: {err.strerror}") from None
    try:
        return None, base64.b64decode(
            str(data).replace("\r", "").replace("\n", ""), validate=True
        ).decode() if data else None
    except (binascii.Error, UnicodeDecodeError):
        raise KubeconfigError(f"{where}: {key}-data is not base64 (standard alphabet, padded)") from None

"""Cluster credentials from a kubeconfig or a pod's service account, without importing a Kubernetes client.

Importing ``kubernetes_asyncio`` (or ``kubernetes``) imports its whole generated API: 2.3 to 2.7 s of a cold
process's time and some 200,000 objects. The provider needs none of it: its transport speaks HTTP itself.
So the static credentials that nearly every deployment uses are read here: the server, its CA (file or
data), ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``, a bearer ``token`` or ``tokenFile``,
a client certificate and key (files or data), basic auth, and in-cluster service accounts. A user entry
with ``exec`` or ``auth-provider`` (EKS, GKE, OIDC plugins) is handed to ``kubernetes_asyncio.config``, whose
plugins refresh short-lived tokens; only those users pay for its import (in a worker thread, see
:mod:`~airflow_provider_training.offloop`).

The semantics are the clients' own: the context given or else ``current-context``; relative paths resolved
against the kubeconfig file's folder; ``*-data`` fields base64-decoded; ``KUBECONFIG`` may list several
files, the first to define a name winning; service-account tokens re-read every minute (they rotate).
What kubectl refuses is refused, naming file, entry and field: a boolean field that is not a boolean (a
quoted ``"false"``), ``insecure-skip-tls-verify`` with a CA, a field as both file and ``-data``, a client
certificate without its key.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import hashlib
import os
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0  # as client-go: projected service-account tokens rotate
_SOURCE = "source"  # the key under which a merged entry keeps the name of the file it came from
_CLUSTER_FLAGS = ("insecure-skip-tls-verify", "disable-compression")  # booleans to kubectl


class KubeconfigError(ValueError):
    """The kubeconfig (or the in-cluster environment) does not name a usable cluster and user."""


@dataclass
class TokenFile:
    """A bearer token kept in a file that may be rotated; read again at most once a minute, or on demand."""

    path: str
    _token: str = field(default="", repr=False)
    _read_at: float = -float("inf")

    def token(self, *, fresh: bool = False) -> str:
        if fresh or time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
            try:
                self._token = Path(self.path).read_text().strip()
            except OSError as err:
                raise KubeconfigError(f"cannot read the token file {self.path}: {err.strerror}") from None
            self._read_at = time.monotonic()
        return self._token


class ServerClock:
    """The API server's clock, as this machine sees it: its own, moved by how far the ``Date`` header of the
    server's latest answer was from it when the answer came (whole seconds; unmoved until one came). What a
    client compares with the server's timestamps (``creationTimestamp``) must be read from this, not from the
    local clock, which may be minutes off."""

    __slots__ = ("known", "offset")

    def __init__(self) -> None:
        self.offset = 0.0  # seconds the server's clock is ahead of this machine's
        self.known = False  # whether an answer's Date header has set it

    def saw(self, date: str | None) -> None:
        """Take the ``Date`` header of an answer that just came (an unreadable one changes nothing)."""
        try:
            server = parsedate_to_datetime(date) if date else None
        except (TypeError, ValueError):
            return
        if server is not None and server.tzinfo is not None:
            self.offset, self.known = (server - datetime.now(UTC)).total_seconds(), True

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)


@dataclass
class ClusterConfig:
    """Where the API server is and how to authenticate and verify it: what the transport needs, no more."""

    host: str
    token: str | None = field(default=None, repr=False)
    token_file: TokenFile | None = None
    basic_auth: str | None = field(default=None, repr=False)  # "user:password"
    ca_file: str | None = None
    ca_data: str | None = field(default=None, repr=False)  # PEM text
    cert_file: str | None = None
    key_file: str | None = None
    verify_ssl: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    # exec / auth-provider users: the headers come from kubernetes_asyncio's refreshing configuration.
    plugin_headers: Callable[[], Awaitable[dict[str, str]]] | None = field(default=None, repr=False)
    # Shared by every transport of this configuration (one object per connection).
    clock: ServerClock = field(default_factory=ServerClock, repr=False, compare=False)

    async def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for the next request (empty without credentials)."""
        if self.plugin_headers is not None:
            return await self.plugin_headers()
        if self.token_file is not None:
            return {"Authorization": f"Bearer {self.token_file.token()}"}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.basic_auth:
            return {"Authorization": "Basic " + base64.b64encode(self.basic_auth.encode()).decode()}
        return {}

    def take_credentials(self, fresh: ClusterConfig) -> None:
        """After a 401: adopt the credentials of a configuration loaded again (a token file is re-read)."""
        self.token, self.basic_auth, self.plugin_headers = fresh.token, fresh.basic_auth, fresh.plugin_headers
        self.token_file = fresh.token_file
        if self.token_file is not None:
            self.token_file.token(fresh=True)

    def tls_key(self) -> tuple[Any, ...]:
        """What the TLS context depends on (files with their versions), for sharing one per process."""
        files = (self.ca_file, self.cert_file, self.key_file)
        return ("ssl", *files, *map(file_version, files), self.ca_data, self.verify_ssl)

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context: the cluster's CA (else the system's), the client certificate, verification."""
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, keyfile=self.key_file)
        if not self.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
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
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    token = TokenFile(str(token_path))
    token.token()
    return ClusterConfig(host=f"https://{host}:{port}", token_file=token, ca_file=str(ca_path))


def in_a_pod() -> bool:
    """Whether the process runs in a pod with a service account (what default credentials use first)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").is_file()


def in_cluster_namespace() -> str | None:
    """The pod's namespace, from its service account's ``namespace`` file (as KubernetesPodOperator)."""
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text().strip() or None
    except OSError:
        return None


def read_kubeconfig_files(paths: str) -> tuple[dict[str, Any], str]:
    """The kubeconfig of ``paths`` (``os.pathsep``-separated, as ``KUBECONFIG``), merged, and the folder
    its relative paths are resolved against (the first file's)."""
    files = [p for p in paths.split(os.pathsep) if p]
    if not files:
        raise KubeconfigError("no kubeconfig file is named")
    merged: dict[str, Any] = {}
    for path in files:
        try:
            text = Path(path).expanduser().read_text()
        except OSError as err:
            if len(files) > 1 and not Path(path).expanduser().exists():
                continue  # as kubectl: a missing file in a list is skipped
            raise KubeconfigError(f"cannot read the kubeconfig {path}: {err.strerror}") from None
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            # The parser's own message may quote a line holding a token: name the file only.
            raise KubeconfigError(f"the kubeconfig {path} is not valid YAML") from None
        if not isinstance(loaded, Mapping):
            raise KubeconfigError(f"the kubeconfig {path} is not a mapping")
        _merge(merged, loaded, f"the kubeconfig {path}")
    return merged, str(Path(files[0]).expanduser().resolve().parent)


def read_kubeconfig_dict(kubeconfig: Mapping[str, Any]) -> dict[str, Any]:
    """A kubeconfig given as a mapping (the connection's ``kube_config``), checked as a file is."""
    merged: dict[str, Any] = {}
    _merge(merged, kubeconfig, "the connection's kube_config")
    return merged


def _merge(into: dict[str, Any], more: Mapping[str, Any], source: str) -> None:
    """Merge as kubectl does: the first file to set ``current-context`` or define a name wins. Each entry
    keeps the name of the file it came from (``source``), for errors; ``source``'s values are type-checked
    first, as kubectl refuses a whole file for one wrong type."""
    _check_types(more, source)
    if "current-context" not in into and more.get("current-context"):
        into["current-context"] = more["current-context"]
    for section in ("clusters", "users", "contexts"):
        known = {entry.get("name") for entry in into.setdefault(section, [])}
        for entry in more.get(section) or []:
            if isinstance(entry, Mapping) and entry.get("name") not in known:
                into[section].append(_with_booleans({**entry, _SOURCE: source}))
                known.add(entry.get("name"))


def _with_booleans(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with its cluster's flags as booleans: ``y``/``n`` are strings to PyYAML, and the client's
    plugin loader takes any string for true."""
    cluster = entry.get("cluster")
    if isinstance(cluster, Mapping):
        flags = {key: _flag(cluster, key, "") for key in _CLUSTER_FLAGS if key in cluster}
        entry["cluster"] = {**cluster, **flags}
    return entry


def _check_types(kubeconfig: Mapping[str, Any], source: str) -> None:
    """Refuse boolean fields that hold anything but a boolean: kubectl does, and a quoted ``"false"`` is a
    string, true in Python (verification would be turned off)."""
    for _, where, cluster in _entries(kubeconfig, "clusters", source):
        for key in _CLUSTER_FLAGS:
            _flag(cluster, key, where)
    for _, where, user in _entries(kubeconfig, "users", source):
        plugin = user.get("exec")
        if isinstance(plugin, Mapping):
            _flag(plugin, "provideClusterInfo", where, "exec.provideClusterInfo")


def _flag(entry: Mapping[str, Any], key: str, where: str, label: str | None = None) -> bool:
    """A kubeconfig boolean: a YAML boolean, or nothing (false). YAML 1.1's ``y`` and ``n``, booleans to
    kubectl, reach us as strings (PyYAML reads them so) and count as the booleans they are."""
    value = entry.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    if value in ("y", "Y", "n", "N"):
        return value in ("y", "Y")
    kind = "string" if isinstance(value, str) else type(value).__name__
    raise KubeconfigError(
        f"{where}: {label or key} must be a boolean (true or false, unquoted), not the {kind} {value!r}"
    )


def uses_plugin(kubeconfig: Mapping[str, Any], context: str | None) -> bool:
    """Whether the chosen user authenticates through an ``exec`` or ``auth-provider`` plugin."""
    user = _entry(kubeconfig, "users", _context(kubeconfig, context).get("user"), required=False)
    return bool(user.get("exec") or user.get("auth-provider"))


def check_usable(kubeconfig: Mapping[str, Any], context: str | None) -> None:
    """Refuse what kubectl refuses in the cluster and user of ``context``: a CA as both file and data,
    ``insecure-skip-tls-verify`` with a CA, a client certificate without its key (or as file and data)."""
    chosen = _context(kubeconfig, context)
    found = _found(kubeconfig, "clusters", chosen.get("cluster"))
    if found is not None:
        where, cluster = found
        insecure = _flag(cluster, "insecure-skip-tls-verify", where)
        _one_of(cluster, "certificate-authority", where)
        ca = [key for key in ("certificate-authority", "certificate-authority-data") if cluster.get(key)]
        if ca and insecure:
            raise KubeconfigError(
                f"{where}: insecure-skip-tls-verify is true and {ca[0]} is set: specifying a root "
                "certificates file with the insecure flag is not allowed (kubectl refuses it too); keep one"
            )
    found = _found(kubeconfig, "users", chosen.get("user"))
    if found is not None:
        where, user = found
        if user.get("client-certificate") or user.get("client-certificate-data"):
            _one_of(user, "client-certificate", where)
            _one_of(user, "client-key", where)
            if not (user.get("client-key") or user.get("client-key-data")):
                given = "client-certificate" if user.get("client-certificate") else "client-certificate-data"
                raise KubeconfigError(
                    f"{where}: {given} is set without client-key or client-key-data: "
                    "a client certificate needs its key"
                )


def _one_of(entry: Mapping[str, Any], key: str, where: str) -> None:
    if entry.get(key) and entry.get(f"{key}-data"):
        raise KubeconfigError(f"{where}: {key} and {key}-data are both set: set only one of them")


def static_config(kubeconfig: Mapping[str, Any], context: str | None, base_dir: str) -> ClusterConfig:
    """The cluster and static credentials of ``context`` (else the current context)."""
    check_usable(kubeconfig, context)
    chosen = _context(kubeconfig, context)
    cluster = _entry(kubeconfig, "clusters", chosen.get("cluster"), required=True)
    user = _entry(kubeconfig, "users", chosen.get("user"), required=False)
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise KubeconfigError(f"cluster {chosen.get('cluster')!r} has no server")
    files = _DataFiles(base_dir)
    username, password = user.get("username"), user.get("password")
    return ClusterConfig(
        host=server,
        token=str(user["token"]) if user.get("token") else None,
        token_file=TokenFile(str(files.path(user["tokenFile"]))) if user.get("tokenFile") else None,
        basic_auth=f"{username}:{password}" if username and password else None,
        ca_file=files.path(cluster.get("certificate-authority")),
        ca_data=_decoded(cluster, "certificate-authority-data"),
        cert_file=files.path(user.get("client-certificate")) or files.data(user, "client-certificate-data"),
        key_file=files.path(user.get("client-key")) or files.data(user, "client-key-data"),
        verify_ssl=not _flag(cluster, "insecure-skip-tls-verify", "the kubeconfig"),  # check_usable: a bool
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
    )


def _context(kubeconfig: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    name = name or kubeconfig.get("current-context")
    if not name:
        raise KubeconfigError("the kubeconfig has no current-context and none was given (cluster_context)")
    entry = _entry(kubeconfig, "contexts", name, required=True)
    return entry


def _entry(kubeconfig: Mapping[str, Any], section: str, name: Any, *, required: bool) -> Mapping[str, Any]:
    """The ``context``/``cluster``/``user`` mapping of the named entry of ``section``."""
    found = _found(kubeconfig, section, name)
    if found is not None:
        return found[1]
    if required:
        names = [found[0] for found in _entries(kubeconfig, section)]
        raise KubeconfigError(f"the kubeconfig has no {section[:-1]} named {name!r} (it has {names})")
    return {}


def _found(kubeconfig: Mapping[str, Any], section: str, name: Any) -> tuple[str, Mapping[str, Any]] | None:
    """Where the named entry of ``section`` is (its file and name, for errors) and its mapping."""
    return next((found[1:] for found in _entries(kubeconfig, section) if found[0] == name), None)


def _entries(
    kubeconfig: Mapping[str, Any], section: str, source: str = "the kubeconfig"
) -> list[tuple[Any, str, Mapping[str, Any]]]:
    """The name, place (the file it came from, else ``source``, and the name) and ``context``/``cluster``/
    ``user`` mapping of each of ``section``'s entries."""
    found = []
    for entry in kubeconfig.get(section) or []:
        if isinstance(entry, Mapping):
            inner = entry.get(section[:-1])
            where = f"{entry.get(_SOURCE, source)}: {section[:-1]} {entry.get('name')!r}"
            found.append((entry.get("name"), where, inner if isinstance(inner, Mapping) else {}))
    return found


def _decoded(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise KubeconfigError(f"{key} is not base64-encoded PEM") from None


class _DataFiles:
    """Paths of a kubeconfig's file references, and private files for its inline client key and certificate
    (``ssl`` loads those from files only), written once per content in a folder removed at exit."""

    _lock = threading.Lock()
    _folder: str | None = None

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir

    def path(self, value: Any) -> str | None:
        return os.path.join(self.base_dir, os.path.expanduser(str(value))) if value else None

    def data(self, entry: Mapping[str, Any], key: str) -> str | None:
        content = _decoded(entry, key)
        if content is None:
            return None
        with _DataFiles._lock:
            if _DataFiles._folder is None:
                _DataFiles._folder = tempfile.mkdtemp(prefix="training-kubeconfig-")  # mode 0700
                atexit.register(shutil.rmtree, _DataFiles._folder, True)
            path = os.path.join(_DataFiles._folder, hashlib.sha256(content.encode()).hexdigest()[:32])
            if not os.path.exists(path):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(content)
        return path

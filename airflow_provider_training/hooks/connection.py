"""Where a hook's cluster credentials come from: the cncf.kubernetes ``kubernetes`` connection.

The connection type is the one users already have (``kubernetes_default``), read with the same extras and
the same precedence as ``KubernetesHook``: ``in_cluster``, ``kube_config_path`` (an explicit ``config_file``
wins), ``kube_config`` (JSON/YAML string or dict), ``cluster_context``, ``namespace``, ``disable_verify_ssl``,
also under the legacy ``extra__kubernetes__`` prefix. The three config sources are mutually exclusive.
A missing ``kubernetes_default`` means default credentials: in-cluster, else ``KUBECONFIG`` /
``~/.kube/config``.

Nothing here blocks an event loop for long: the connection is resolved with the async connection API, and the
kubeconfig is parsed once per hook.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

DEFAULT_CONN_ID = "kubernetes_default"
_LEGACY_PREFIX = "extra__kubernetes__"
_TRUE = {"true", "1", "yes", "on"}


class ConnectionConfigError(ValueError):
    """The ``kubernetes`` connection names no usable, unambiguous cluster configuration."""


@dataclass(frozen=True)
class KubeSettings:
    """The cluster configuration a hook uses, after merging constructor arguments and connection extras."""

    in_cluster: bool = False
    kube_config_path: str | None = None
    kube_config: Mapping[str, Any] | None = field(default=None, repr=False)  # holds credentials
    cluster_context: str | None = None
    namespace: str | None = None
    disable_verify_ssl: bool = False

    @classmethod
    def from_extras(
        cls,
        extras: Mapping[str, Any],
        *,
        config_file: str | None = None,
        cluster_context: str | None = None,
        namespace: str | None = None,
    ) -> KubeSettings:
        """Merge explicit arguments (which win) with the connection's extras."""

        def field(name: str) -> Any:
            value = extras.get(name)
            if value in (None, ""):
                value = extras.get(_LEGACY_PREFIX + name)
            return None if value in (None, "") else value

        in_cluster = _as_bool(field("in_cluster"))
        kube_config_path = config_file or field("kube_config_path")
        kube_config = _parse_kube_config(field("kube_config"))
        chosen = [
            name
            for name, value in (
                ("in_cluster", in_cluster),
                ("kube_config_path", kube_config_path),
                ("kube_config", kube_config),
            )
            if value
        ]
        if len(chosen) > 1:
            raise ConnectionConfigError(
                f"The kubernetes connection sets {' and '.join(chosen)}; in_cluster, kube_config_path "
                "(or the hook's config_file) and kube_config are mutually exclusive: set only one of them."
            )
        return cls(
            in_cluster=in_cluster,
            kube_config_path=str(kube_config_path) if kube_config_path else None,
            kube_config=kube_config,
            cluster_context=cluster_context or field("cluster_context"),
            namespace=namespace or field("namespace"),
            disable_verify_ssl=_as_bool(field("disable_verify_ssl")),
        )


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return bool(value)


def _parse_kube_config(value: Any) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as err:
            # The parser's own message quotes the offending line, which may hold a token: give the place only.
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or "invalid syntax"
            raise ConnectionConfigError(
                f"The connection's kube_config is neither JSON nor YAML{where}: {problem}"
            ) from None
    if not isinstance(parsed, Mapping):
        raise ConnectionConfigError(
            "The connection's kube_config must be a kubeconfig mapping (JSON or YAML)."
        )
    return parsed


def _not_found_error() -> type[Exception]:
    from airflow.sdk.exceptions import AirflowNotFoundException

    return AirflowNotFoundException


_lookups: dict[tuple[int, str], asyncio.Task[dict[str, Any]]] = {}


async def load_connection_extras(conn_id: str | None) -> dict[str, Any]:
    """The connection's extras, resolved without blocking the event loop; ``{}`` for a missing default.

    Callers on one loop that ask while a lookup of the same connection is under way share it: hundreds of
    triggers starting together cost one lookup (tens of ms of the loop's time each, in Airflow's secrets
    backends), and a caller cancelled meanwhile (a trigger killed as it starts) does not abandon a request
    to the triggerer's supervisor half-way, whose late answer would then reach the next request instead."""
    if not conn_id:
        return {}
    loop = asyncio.get_running_loop()
    key = (id(loop), conn_id)
    lookup = _lookups.get(key)
    if lookup is None:
        lookup = _lookups[key] = loop.create_task(_lookup_extras(conn_id))
        lookup.add_done_callback(lambda _: _lookups.pop(key, None))
    return dict(await asyncio.shield(lookup))


async def _lookup_extras(conn_id: str) -> dict[str, Any]:
    from airflow.providers.common.compat.connection import get_async_connection, get_async_extra_dejson

    try:
        conn = await get_async_connection(conn_id)
    except _not_found_error():
        if conn_id == DEFAULT_CONN_ID:
            return {}
        raise
    return dict(await get_async_extra_dejson(conn))


def load_connection_extras_sync(conn_id: str | None) -> dict[str, Any]:
    """The same as :func:`load_connection_extras`, for code that runs outside an event loop."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except _not_found_error():
        if conn_id == DEFAULT_CONN_ID:
            return {}
        raise
    return dict(conn.extra_dejson)


async def build_configuration(settings: KubeSettings) -> Configuration:
    """A kubernetes_asyncio client configuration for ``settings`` (never the process-wide default)."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import Configuration

    cfg = Configuration()
    if settings.in_cluster:
        config.load_incluster_config(client_configuration=cfg)
    elif settings.kube_config_path:
        await config.load_kube_config(
            config_file=settings.kube_config_path,
            context=settings.cluster_context,
            client_configuration=cfg,
            persist_config=False,
        )
    elif settings.kube_config is not None:
        await config.load_kube_config_from_dict(
            dict(settings.kube_config), context=settings.cluster_context, client_configuration=cfg
        )
    else:
        await _load_default(cfg, settings.cluster_context)
    if settings.disable_verify_ssl:
        cfg.verify_ssl = False
    return cfg


_shared: dict[tuple[Any, ...], Configuration] = {}
_building: dict[tuple[int, tuple[Any, ...]], asyncio.Task[Configuration]] = {}


async def shared_configuration(settings: KubeSettings) -> Configuration:
    """One :func:`build_configuration` per cluster settings (and kubeconfig file version), per process.

    Parsing a kubeconfig takes milliseconds of CPU on the event loop; hundreds of triggers starting together
    on one connection share one parse (concurrent callers await the one build under way). Callers share the
    object: a transport that reloads expired credentials into it reloads them for all.
    """
    path = settings.kube_config_path
    inline = json.dumps(settings.kube_config, sort_keys=True, default=str) if settings.kube_config else None
    key = (
        settings.in_cluster,
        path,
        file_version(path),
        inline,
        settings.cluster_context,
        settings.disable_verify_ssl,
    )
    if (found := _shared.get(key)) is not None:
        return found
    loop = asyncio.get_running_loop()
    task = _building.get((id(loop), key))
    if task is None:
        task = _building[(id(loop), key)] = loop.create_task(build_configuration(settings))
        task.add_done_callback(lambda _: _building.pop((id(loop), key), None))
    cfg = await asyncio.shield(task)  # a caller cancelled does not cancel the others' build
    _shared[key] = cfg
    return cfg


def file_version(path: str | None) -> int | None:
    """A file's modification time (ns), for cache keys; ``None`` without a file (its reader reports that)."""
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


async def _load_default(cfg: Configuration, context: str | None) -> None:
    """In-cluster credentials when running in a pod, else the user's kubeconfig (``KUBECONFIG`` honoured)."""
    from kubernetes_asyncio import config

    try:
        config.load_incluster_config(client_configuration=cfg)
        return
    except config.ConfigException:
        pass
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    await config.load_kube_config(
        config_file=path, context=context, client_configuration=cfg, persist_config=False
    )

"""Where a hook's cluster credentials come from: the cncf.kubernetes ``kubernetes`` connection, read with the
extras and precedence of ``KubernetesHook``: ``in_cluster``, ``kube_config_path`` (an explicit ``config_file``
wins), ``kube_config`` (JSON/YAML string or dict), ``cluster_context``, ``namespace``, ``disable_verify_ssl``,
also under the legacy ``extra__kubernetes__`` prefix. The three config sources are mutually exclusive. A
missing ``kubernetes_default`` means default credentials (with a warning): in-cluster, else ``KUBECONFIG`` /
``~/.kube/config``; any other missing connection is an error naming it. Nothing here blocks an event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from airflow_provider_training.hooks.credentials import shared_flight
from airflow_provider_training.hooks.kubeconfig import (
    ClusterConfig,
    KubeconfigError,
    cluster_config,
    file_version,
    in_a_pod,
    in_cluster_config,
    in_cluster_namespace,
    read_kubeconfig_dict,
    read_kubeconfig_files,
)

DEFAULT_CONN_ID = "kubernetes_default"
log = logging.getLogger(__name__)
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
        sources = {"in_cluster": in_cluster, "kube_config_path": kube_config_path, "kube_config": kube_config}
        if len(chosen := [name for name, value in sources.items() if value]) > 1:
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
    return value.strip().lower() in _TRUE if isinstance(value, str) else bool(value)


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


async def load_connection_extras(conn_id: str | None) -> dict[str, Any]:
    """The connection's extras, resolved without blocking the event loop; ``{}`` for a missing default.

    Callers on one loop that ask while a lookup of the same connection is under way share it: hundreds of
    triggers starting together cost one lookup (tens of ms of the loop's time each, in Airflow's secrets
    backends), and a caller cancelled meanwhile (a trigger killed as it starts) does not abandon a request
    to the triggerer's supervisor half-way, whose late answer would then reach the next request instead."""
    return dict(await shared_flight(("extras", conn_id), lambda: _lookup_extras(conn_id))) if conn_id else {}


async def _lookup_extras(conn_id: str) -> dict[str, Any]:
    comms, answers_async = supervisor_comms()
    if comms is not None and not answers_async:  # the trigger is alone on its loop: blocking costs nothing
        return load_connection_extras_sync(conn_id)
    from airflow.providers.common.compat.connection import get_async_connection, get_async_extra_dejson
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = await get_async_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == DEFAULT_CONN_ID:
            return _default_credentials()
        raise
    return dict(await get_async_extra_dejson(conn))


def supervisor_comms() -> tuple[Any, bool]:
    """The Task SDK's link to its supervisor (``None`` outside a task or triggerer process) and whether it
    answers async requests (``asend``). ``airflow dags test`` runs a deferred task's trigger in its own
    process over a link that answers only synchronously (Airflow 3.3's ``InProcessSupervisorComms``): there an
    async connection lookup fails inside the SDK and reports every connection missing, and a trigger's async
    question about its task instance cannot be asked."""
    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    return comms, hasattr(comms, "asend")


def load_connection_extras_sync(conn_id: str | None) -> dict[str, Any]:
    """The same as :func:`load_connection_extras`, for code that runs outside an event loop."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == DEFAULT_CONN_ID:
            return _default_credentials()
        raise
    return dict(conn.extra_dejson)


def _default_credentials() -> dict[str, Any]:
    """No ``kubernetes_default``: as KubernetesHook, the default credentials, said in the log."""
    log.warning(
        "The connection %s is not defined: using the default credentials (the pod's service account in a "
        "pod, else KUBECONFIG or ~/.kube/config)",
        DEFAULT_CONN_ID,
    )
    return {}


async def build_configuration(settings: KubeSettings) -> ClusterConfig:
    """The cluster configuration for ``settings`` (see :mod:`.kubeconfig`); files are read in a thread. An
    exec plugin runs here once: the client certificate it may return is part of the TLS setup."""
    cfg = await asyncio.to_thread(_load, settings)
    if cfg.plugin is not None:
        await cfg.plugin.prepare()
    return cfg


def _load(settings: KubeSettings) -> ClusterConfig:
    try:
        if uses_service_account(settings):
            cfg = in_cluster_config()
        elif settings.kube_config is not None:
            cfg = cluster_config(
                read_kubeconfig_dict(settings.kube_config, os.getcwd()), settings.cluster_context
            )
        else:
            paths = settings.kube_config_path or os.environ.get("KUBECONFIG") or "~/.kube/config"
            cfg = cluster_config(read_kubeconfig_files(paths), settings.cluster_context)
    except KubeconfigError as err:
        raise ConnectionConfigError(f"The kubernetes connection's cluster configuration: {err}") from None
    if settings.disable_verify_ssl:
        cfg.verify_ssl = False
    return cfg


def uses_service_account(settings: KubeSettings) -> bool:
    """Whether ``settings`` mean the pod's service account: ``in_cluster``, or no kubeconfig in a pod."""
    if settings.in_cluster:
        return True
    if settings.kube_config is not None or settings.kube_config_path is not None:
        return False
    return in_a_pod()


def default_namespace(settings: KubeSettings) -> str:
    """A job's namespace when neither it nor the operator names one: the ``namespace`` extra, else (on the
    pod's service account) the pod's own namespace, as KubernetesPodOperator, else ``default``."""
    if settings.namespace:
        return settings.namespace
    return (uses_service_account(settings) and in_cluster_namespace()) or "default"


_shared: dict[tuple[Any, ...], ClusterConfig] = {}


async def shared_configuration(settings: KubeSettings) -> ClusterConfig:
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
        None if path else os.environ.get("KUBECONFIG"),  # default credentials: the files it names
        inline,
        settings.cluster_context,
        settings.disable_verify_ssl,
    )
    if (found := _shared.get(key)) is None:
        found = _shared[key] = await shared_flight(
            ("configuration", key), lambda: build_configuration(settings)
        )
    return found

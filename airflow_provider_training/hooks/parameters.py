"""The training-job hooks' constructor parameters, written once: both hooks inherit them from here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any

from airflow_provider_training.hooks.connection import DEFAULT_CONN_ID
from airflow_provider_training.hooks.retry import RetryPolicy

DEFAULT_RETRY = RetryPolicy()


@dataclass(eq=False, slots=True)  # hooks stay equal only to themselves, and hashable; slots: a trigger
# holds one per deferred task
class HookParameters:
    """Which cluster a hook talks to and how; the parameters of ``AsyncTrainingJobHook`` and of
    ``TrainingJobHook``, which subclass this and set up their own state in ``__post_init__``.

    ``kubernetes_conn_id`` names a ``kubernetes`` connection (``None``: default credentials);
    ``config_file``, ``cluster_context`` and ``namespace`` win over its extras; ``connection_extras`` are its
    extras already resolved, so the connection is not looked up again; ``retry`` and ``request_timeout``
    apply to every request.
    """

    kubernetes_conn_id: str | None = DEFAULT_CONN_ID
    _: KW_ONLY
    config_file: str | None = None
    cluster_context: str | None = None
    namespace: str | None = None
    connection_extras: Mapping[str, Any] | None = field(default=None, repr=False)  # may hold credentials
    retry: RetryPolicy = DEFAULT_RETRY  # immutable: every hook shares the default
    request_timeout: float = 60.0

    def __post_init__(self) -> None:
        """Where a hook sets up its own state (``__init__``, generated from the fields above, calls it)."""

    @property
    def connection_key(self) -> tuple[str | None, str | None, str | None]:
        """What decides which cluster and credentials the hook uses (the watch hub shares watches by it)."""
        return (self.kubernetes_conn_id, self.config_file, self.cluster_context)

    def parameters(self, **changes: Any) -> dict[str, Any]:
        """These parameters by name, with ``changes``: another hook on the same connection takes them."""
        return {item.name: getattr(self, item.name) for item in fields(HookParameters)} | changes

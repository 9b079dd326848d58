"""Look up a :class:`JobKind` by kind name, optionally with its apiVersion.

Every family module listed in :data:`FAMILY_MODULES` exports ``KINDS: tuple[JobKind, ...]``; adding a
family is one line here. Families come in preference order: ``get_kind("MXJob")`` without an apiVersion
answers with the first family that has an MXJob (``kubeflow.org/v1``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import cache
from types import ModuleType

from airflow_provider_training.kinds.base import JobKind
from airflow_provider_training.kinds.errors import SpecError

FAMILY_MODULES: tuple[str, ...] = (
    "airflow_provider_training.kinds.kubeflow",
    "airflow_provider_training.kinds.mxnet_legacy",
    "airflow_provider_training.kinds.paddle_edl",
    "airflow_provider_training.kinds.tensorstack",
    "airflow_provider_training.kinds.trainer",
    "airflow_provider_training.kinds.mpi_operator",
)


def all_kinds() -> list[JobKind]:
    """Every known kind, families in :data:`FAMILY_MODULES` order."""
    return list(_load_kinds())


def import_family_modules(module_names: Iterable[str]) -> list[ModuleType]:
    """Import each module (on first use, so that importing the registry stays cheap); every one must exist."""
    return [importlib.import_module(module_name) for module_name in module_names]


@cache
def _load_kinds() -> tuple[JobKind, ...]:
    return tuple(kind for module in import_family_modules(FAMILY_MODULES) for kind in module.KINDS)


def known_kinds_text() -> str:
    """``MPIJob (kubeflow.org/v1), ...`` for error messages."""
    return ", ".join(sorted(f"{kind.kind} ({kind.api_version})" for kind in all_kinds()))


def get_kind(kind: str, api_version: str | None = None) -> JobKind:
    """The kind named exactly ``kind`` (case-sensitive), in ``api_version`` if given.

    Raises ``SpecError`` (a ``ValueError``) naming the known kinds (or the kind's known apiVersions) when
    there is no match.
    """
    candidates = [known for known in all_kinds() if known.kind == kind]
    if not candidates:
        hint = [known.kind for known in all_kinds() if known.kind.lower() == str(kind).lower()]
        did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
        unknown = f"unknown training job kind {kind!r}{did_you_mean}; known kinds: {known_kinds_text()}"
        raise SpecError([("kind", unknown)])
    if api_version is None:
        return candidates[0]
    for known in candidates:
        if known.api_version == api_version:
            return known
    versions = ", ".join(known.api_version for known in candidates)
    unknown = f"{kind} is not known in apiVersion {api_version!r}; known apiVersions of {kind}: {versions}"
    raise SpecError([("apiVersion", unknown)], kind=kind)

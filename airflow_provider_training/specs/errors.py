"""The one error a bad job spec raises (defined in :mod:`airflow_provider_training.kinds.errors`, which the
kinds' registry raises too: ``kinds/`` imports nothing from ``specs/``)."""

from __future__ import annotations

from airflow_provider_training.kinds.errors import FieldErrors, SpecError

__all__ = ["FieldErrors", "SpecError"]

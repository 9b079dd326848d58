"""Apache Airflow provider for distributed training jobs on Kubernetes."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """Provider metadata read by Airflow's ``apache_airflow_provider`` entry point."""
    from airflow_provider_training.provider_info import PROVIDER_INFO

    return PROVIDER_INFO

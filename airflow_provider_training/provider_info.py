"""The dict Airflow's provider discovery reads; kept apart so importing the package stays cheap."""

from __future__ import annotations

from typing import Any

PROVIDER_INFO: dict[str, Any] = {
    "package-name": "airflow-provider-training",
    "name": "Distributed Training",
    "description": "Operators, sensors and triggers for distributed training jobs on Kubernetes.",
    "versions": ["0.1.0"],
}

"""The provider's Airflow plugin (the ``airflow.plugins`` entry point in ``pyproject.toml``), which every
component loads.

Kept cheap to import: components load plugins at start-up, workers and the dag-processor included.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_training.plugins import kill_listener


class TrainingPlugin(AirflowPlugin):
    """Listeners of the distributed-training provider."""

    name = "training"
    listeners = [kill_listener]

"""The provider's Airflow plugin (the ``airflow.plugins`` entry point in ``pyproject.toml``), which every
component loads.

Kept cheap to import: components load plugins at start-up, workers and the dag-processor included. The
Training tab's FastAPI app (:mod:`.ui_api`, which imports FastAPI, Airflow's API security and the provider's
hook) is built by :class:`LazyApp` on the api-server's first request to ``/training``, never elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_training.plugins import kill_listener

URL_PREFIX = "/training"
BUNDLE_URL = f"{URL_PREFIX}/static/main.umd.cjs"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that builds the Training tab's FastAPI app when it first serves a request (or lifespan)."""

    def __init__(self) -> None:
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from airflow_provider_training.plugins.ui_api import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class TrainingPlugin(AirflowPlugin):
    """The kill listener and the Training tab of the task instance page."""

    name = "training"
    listeners = [kill_listener]
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Training tab API"}]
    react_apps = [
        {
            "name": "Training",
            "bundle_url": BUNDLE_URL,
            "destination": "task_instance",
            "url_route": "training",
        }
    ]

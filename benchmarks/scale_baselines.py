"""The two polling baselines of ``scale.py``, written as triggers the way their models poll.

- :class:`SdkPollingTrigger`: GET the job every ``poll_interval`` s through **one client shared by every
  trigger of the process** (one ``kubernetes_asyncio`` ``ApiClient``, one connection pool), as the Kubeflow
  SDK's ``TrainerClient`` polls in ``wait_for_job_conditions`` (one ``CustomObjectsApi`` per client, a GET of
  the job per interval). The most favourable polling set-up: no per-trigger client.
- :class:`CncfStylePollingTrigger`: the way apache-airflow-providers-cncf-kubernetes' triggers poll
  (``KubernetesJobTrigger`` -> ``AsyncKubernetesHook.wait_until_job_complete`` -> ``get_job_status``): one
  real ``AsyncKubernetesHook`` per trigger (a ``cached_property``), its configuration loaded once, and **a new
  ``ApiClient`` per poll** (``async with hook.get_conn()``, closed after the GET), with the provider's
  ``generic_api_retry`` and its two INFO lines per poll. The job is a custom object, so the GET is
  ``CustomObjectsApi.get_namespaced_custom_object`` where the cncf hook calls ``read_namespaced_job_status``.

Both start with a GET at once (as their models do) and return one event when the job is terminal.

- :class:`IdleTrigger`: the floor, no baseline of a client: a trigger that sends no request and waits on one
  future until the triggerer cancels it. What it costs per trigger is what the triggerer (the harness's
  ``run_trigger`` task, greenback's portal, ``BaseTrigger`` and its logger) spends on any trigger at all, so
  no provider's trigger can cost less.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

TERMINAL = ("Succeeded", "Failed")


def job_state(job: dict[str, Any]) -> str | None:
    """``Succeeded`` / ``Failed`` from the job's conditions, else ``None``."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in TERMINAL and condition.get("status") == "True":
            return str(condition["type"])
    return None


class _Polling(BaseTrigger):
    def __init__(
        self, *, group: str, version: str, plural: str, job_name: str, namespace: str, poll_interval: float
    ) -> None:
        super().__init__()
        self.group, self.version, self.plural = group, version, plural
        self.job_name, self.namespace, self.poll_interval = job_name, namespace, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "group": self.group,
                "version": self.version,
                "plural": self.plural,
                "job_name": self.job_name,
                "namespace": self.namespace,
                "poll_interval": self.poll_interval,
            },
        )

    def _event(self, job: dict[str, Any], state: str) -> TriggerEvent:
        return TriggerEvent(
            {"status": "success" if state == "Succeeded" else "failed", "name": self.job_name}
        )


class SdkPollingTrigger(_Polling):
    """GET the job every ``poll_interval`` s through the process's one shared client (Kubeflow SDK style)."""

    kubeconfig: str = ""  # set by the runner: where the shared client's configuration comes from
    _shared: dict[int, Any] = {}  # one CustomObjectsApi per event loop

    async def _api(self) -> Any:
        from kubernetes_asyncio import client, config

        key = id(asyncio.get_running_loop())
        if key not in self._shared:
            configuration = client.Configuration()
            await config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
            self._shared[key] = client.CustomObjectsApi(client.ApiClient(configuration))
        return self._shared[key]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        api = await self._api()
        while True:
            job = await api.get_namespaced_custom_object(
                self.group, self.version, self.namespace, self.plural, self.job_name
            )
            if (state := job_state(job)) is not None:
                yield self._event(job, state)
                return
            await asyncio.sleep(self.poll_interval)


class CncfStylePollingTrigger(_Polling):
    """Poll like the cncf provider's triggers: a real ``AsyncKubernetesHook``, a new ``ApiClient`` per GET."""

    kubernetes_conn_id: str = "kubernetes_default"  # set by the runner

    @cached_property
    def hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        return AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)

    async def get_job_status(self) -> dict[str, Any]:
        from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
        from kubernetes_asyncio import client

        @generic_api_retry
        async def get() -> dict[str, Any]:
            async with self.hook.get_conn() as connection:  # a new ApiClient, closed after the call
                api = client.CustomObjectsApi(connection)
                return dict(
                    await api.get_namespaced_custom_object(
                        self.group, self.version, self.namespace, self.plural, self.job_name
                    )
                )

        return await get()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:  # AsyncKubernetesHook.wait_until_job_complete, for a custom object
            self.log.info("Requesting status for the job '%s' ", self.job_name)
            job = await self.get_job_status()
            if (state := job_state(job)) is not None:
                yield self._event(job, state)
                return
            self.log.info(
                "The job '%s' is incomplete. Sleeping for %i sec.", self.job_name, self.poll_interval
            )
            await asyncio.sleep(self.poll_interval)


class IdleTrigger(BaseTrigger):
    """The floor: no request, no state but its job's name; waits until cancelled."""

    def __init__(self, *, job_name: str) -> None:
        super().__init__()
        self.job_name = job_name

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"job_name": self.job_name}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await asyncio.get_running_loop().create_future()  # never done: the harness cancels it
        yield TriggerEvent({"status": "never", "name": self.job_name})

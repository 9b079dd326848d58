"""``TrainingJobLink``: a link to the job's page, from a URL template set by the deployment.

The template comes from the connection extra ``training_job_url_template`` or the provider config
``[training] job_url_template`` and may use ``{namespace}``, ``{name}``, ``{kind}``, ``{plural}`` and
``{uid}``, e.g. ``https://dashboard.example.com/#/{namespace}/{plural}/{name}``.
Without a template there is no link.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

TEMPLATE_EXTRA = "training_job_url_template"


class TrainingJobLink(BaseOperatorLink):
    """The job page of the task's training job (XCom-backed: :meth:`persist` stores the identity)."""

    name: ClassVar[str] = "Training Job"
    key: ClassVar[str] = "training_job"

    @classmethod
    def persist(
        cls,
        context: Mapping[str, Any],
        *,
        kubernetes_conn_id: str | None,
        plural: str,
        identity: Mapping[str, Any],
    ) -> None:
        """Store what the link needs, including the template, so rendering it needs no connection lookup."""
        template = url_template(kubernetes_conn_id)
        context["ti"].xcom_push(key=cls.key, value={**identity, "plural": plural, "template": template})

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(key=self.key, ti_key=ti_key)
        if not value:
            return ""
        return format_link(value)


def format_link(value: Mapping[str, Any]) -> str:
    template = value.get("template") or ""
    if not template:
        return ""
    fields = {k: value.get(k) or "" for k in ("namespace", "name", "kind", "plural", "uid")}
    try:
        return str(template).format(**fields)
    except (KeyError, IndexError, ValueError):
        return ""


def url_template(kubernetes_conn_id: str | None) -> str:
    """The connection extra ``training_job_url_template``, else ``[training] job_url_template``, or ``""``."""
    from airflow.sdk import BaseHook
    from airflow.sdk.configuration import conf

    if kubernetes_conn_id:
        with contextlib.suppress(Exception):  # a missing connection means default credentials, no template
            extra = BaseHook.get_connection(kubernetes_conn_id).extra_dejson
            if extra.get(TEMPLATE_EXTRA):
                return str(extra[TEMPLATE_EXTRA])
    return str(conf.get("training", "job_url_template", fallback="") or "")

"""``TrainingJobLink``: a link to the job's page, from a URL template set by the deployment.

The template comes from the connection extra ``training_job_url_template`` or the provider config
``[training] job_url_template`` and may use ``{namespace}``, ``{name}``, ``{kind}``, ``{plural}`` and
``{uid}``, e.g. ``https://dashboard.example.com/#/{namespace}/{plural}/{name}``.

Each setting is one template for every kind, or a JSON object of templates by kind name (``PyTorchJob``), by
family (``kubeflow``, ``mxnet-legacy``, ``paddle-edl``, ``tensorstack``) and ``default``, the most specific
first: a T9k job then gets the T9k console's page, not a Kubeflow dashboard's. The connection's setting is
asked first, then the config's. A kind no setting covers has no link, rather than another family's page.
"""

from __future__ import annotations

import contextlib
import json
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
        from airflow_provider_training.kinds.registry import get_kind

        kind = get_kind(identity["kind"], identity.get("api_version"))
        template = url_template(kubernetes_conn_id, kind=kind.kind, family=kind.family)
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


def url_template(kubernetes_conn_id: str | None, *, kind: str = "", family: str = "") -> str:
    """The template for ``kind`` of ``family``: from the connection extra ``training_job_url_template``,
    else from ``[training] job_url_template``; ``""`` when neither covers it."""
    from airflow.sdk import BaseHook
    from airflow.sdk.configuration import conf

    settings: list[Any] = []
    if kubernetes_conn_id:
        with contextlib.suppress(Exception):  # a missing connection means default credentials, no template
            settings.append(BaseHook.get_connection(kubernetes_conn_id).extra_dejson.get(TEMPLATE_EXTRA))
    settings.append(conf.get("training", "job_url_template", fallback=""))
    for setting in settings:
        if template := choose_template(setting, kind, family):
            return template
    return ""


def choose_template(setting: Any, kind: str, family: str) -> str:
    """One setting's template for the kind: the setting itself if it is one template, else (a mapping, or
    JSON text of one) its entry for the kind, the family or ``default``, in that order."""
    if isinstance(setting, str) and setting.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            setting = json.loads(setting)
    if isinstance(setting, Mapping):
        return next((str(setting[key]) for key in (kind, family, "default") if setting.get(key)), "")
    return str(setting or "")

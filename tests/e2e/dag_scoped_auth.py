"""SimpleAuthManager with a few rules more: the user ``outsider`` may not read the DAG ``e2e_ui``, the user
``nologs`` may not read any DAG's task logs, and the user ``noxcom`` may not read any DAG's XComs.

SimpleAuthManager's roles are global (a viewer reads every DAG, its task logs and its XComs); per-DAG and
per-entity access is what real deployments get from FAB, Keycloak or multi-team mode. The Training tab's
tests need users that Airflow's own authorization refuses one DAG, or one kind of a DAG's data, so the
api-server loads this (``[core] auth_manager``): the decision still goes through Airflow's auth manager and
its ``requires_access_dag`` dependencies, as in production.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

OUTSIDER = "outsider"
PRIVATE_DAG = "e2e_ui"
NO_LOGS = "nologs"  # a viewer refused DagAccessEntity.TASK_LOGS
NO_XCOM = "noxcom"  # a viewer refused DagAccessEntity.XCOM
REFUSED_ENTITY = {NO_LOGS: DagAccessEntity.TASK_LOGS, NO_XCOM: DagAccessEntity.XCOM}


class DagScopedSimpleAuthManager(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        if user.username == OUTSIDER and details is not None and details.id == PRIVATE_DAG:
            return False
        if access_entity is not None and REFUSED_ENTITY.get(user.username) == access_entity:
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )

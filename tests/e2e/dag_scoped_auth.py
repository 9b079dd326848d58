"""SimpleAuthManager with one rule more: the user ``outsider`` may not read the DAG ``e2e_ui``.

SimpleAuthManager's roles are global (a viewer reads every DAG); per-DAG access is what real deployments get
from FAB, Keycloak or multi-team mode. The Training tab's browser test needs one user that Airflow's own
authorization refuses for one DAG, so the api-server loads this (``[core] auth_manager``): the decision still
goes through Airflow's auth manager and its ``requires_access_dag`` dependencies, as in production.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

OUTSIDER = "outsider"
PRIVATE_DAG = "e2e_ui"


class DagScopedSimpleAuthManager(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        if user.username == OUTSIDER and details is not None and details.id == PRIVATE_DAG:
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )

"""The Training tab's FastAPI app, mounted by the api-server under ``/training`` (contract: docs/ui-tab.md).

``GET /api/job``, ``GET /api/logs`` and ``GET /api/logs/stream`` take the task instance as query parameters
and check, through Airflow's auth manager, that the caller may read that DAG's task instances (the same
dependency Airflow's own task-instance routes use: no credentials 401, not allowed 403). The log routes also
demand what Airflow's own log route demands (the DAG's task logs), and the saved last lines, which the
trigger stores as an XCom, what Airflow's XCom reads demand. The UI's own requests authenticate with the
``_token`` cookie, which a same-origin ``fetch`` or ``EventSource`` sends.
``GET /static/main.umd.cjs`` serves the React bundle (``plugins/www/dist``), 404 when it was not built.

Imported by the api-server only (through ``TrainingPlugin``'s lazy app), never by other components.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from airflow_provider_training import naming
from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.kinds.base import JobKind, RawObject
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.log_cursor import LogCursor
from airflow_provider_training.logs import container_name, replica_label
from airflow_provider_training.plugins import ui_logs, ui_views
from airflow_provider_training.plugins.ui_cluster import (
    HOOKS,
    SNAPSHOTS,
    ClusterError,
    Snapshot,
    describe_failure,
    read_snapshot,
)
from airflow_provider_training.plugins.ui_records import TaskNotFound, TaskRecord, read_task

BUNDLE = Path(__file__).parent / "www" / "dist" / "main.umd.cjs"
DEFAULT_TAIL = 200
MAX_TAIL = 5000


@dataclass(frozen=True)
class TaskQuery:
    """The task instance every route takes."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int | None = None


Task = Annotated[TaskQuery, Depends()]


@dataclass(frozen=True)
class Found:
    """What :func:`locate` found: the task's record and either the plain view that says why there is no job
    to show, or the job's kind and snapshot."""

    record: TaskRecord
    plain: dict[str, Any] | None = None
    kind: JobKind | None = None
    snapshot: Snapshot | None = None

    @property
    def namespace(self) -> str:
        return str((self.record.ref or {}).get("namespace"))

    def pod(self, replica: str) -> RawObject | None:
        if self.kind is None or self.snapshot is None:
            return None
        kind = self.kind
        return next((p for p in self.snapshot.pods if replica_label(kind.replica_of_pod(p)) == replica), None)


async def locate(query: TaskQuery) -> Found:
    """The task's job and its snapshot, or the plain view that says why there is none."""
    try:
        record = await run_in_threadpool(
            read_task, query.dag_id, query.run_id, query.task_id, query.map_index, query.try_number
        )
    except TaskNotFound as err:
        raise HTTPException(404, str(err)) from None

    def plain(view: str, detail: str, with_job: bool = True) -> Found:
        identity = ui_views.job_identity(record, record.link) if with_job else None
        return Found(record, ui_views.plain(view, detail, record, identity))

    if not record.training:
        return plain(
            "not_training",
            f"The task runs {record.operator}, not an operator of the training provider.",
            False,
        )
    ref, recorded = record.ref, record.recorded_try
    if ref is None or (recorded is not None and record.try_number > recorded):
        never = "The task has not run yet" if record.try_number == 0 else f"Try {record.try_number} has not"
        return plain("not_submitted", f"{never} submitted a job yet.", False)
    try:
        kind = get_kind(str(ref["kind"]), ref.get("api_version"))
    except ValueError as err:
        return plain("cluster_error", str(err))
    name, namespace, uid = str(ref["name"]), str(ref["namespace"]), ref.get("uid")
    try:
        snapshot = await SNAPSHOTS.get(
            (record.conn_id, kind.kind, kind.api_version, namespace, name, uid),
            lambda: read_snapshot(HOOKS.get(record.conn_id), kind, name, namespace, uid),
        )
    except ClusterError as err:
        return plain("cluster_error", str(err))
    label = f"{kind.kind} {namespace}/{name}"
    if snapshot.job is None:
        return plain(
            "deleted", f"{label} is gone from the cluster: deleted by its cleanup policy or by hand."
        )
    created_by = str((snapshot.job["metadata"].get("annotations") or {}).get(naming.TRY_NUMBER) or "")
    if recorded is not None and created_by.isdigit() and int(created_by) > record.try_number:
        return plain("deleted", f"Try {record.try_number}'s job was replaced by try {created_by}'s, {label}.")
    return Found(record, kind=kind, snapshot=snapshot)


def create_app() -> FastAPI:
    app = FastAPI(title="Training tab", docs_url=None, redoc_url=None, openapi_url=None)
    readable = [Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE))]
    # Airflow's own task log route demands TASK_LOGS; the tab shows the same lines.
    logs_readable = [
        *readable,
        Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_LOGS)),
    ]

    @app.get("/api/job", dependencies=readable)
    async def job(query: Task) -> dict[str, Any]:
        found = await locate(query)
        if found.plain is not None:
            return found.plain
        assert found.kind is not None and found.snapshot is not None
        now = (await HOOKS.get(found.record.conn_id).server_clock()).now()
        return ui_views.job_view(found.record, found.kind, found.snapshot, found.record.link, now)

    @app.get("/api/logs", dependencies=logs_readable)
    async def logs(
        request: Request,
        user: GetUserDep,
        query: Task,
        replica: str,
        tail: Annotated[int, Query(ge=1, le=MAX_TAIL)] = DEFAULT_TAIL,
    ) -> dict[str, Any]:
        found = await locate(query)
        pod = found.pod(replica)
        if pod is None or found.kind is None:
            return await saved_lines(found, replica, request, user)
        conn_id = found.record.conn_id
        try:
            text = await HOOKS.get(conn_id).read_log(
                found.namespace,
                pod["metadata"]["name"],
                container_name(pod, found.kind.default_container),
                tail_lines=tail,
                timestamps=True,
            )
        except KubeApiError as err:
            if err.status == 404:
                return await saved_lines(found, replica, request, user)
            if err.status != 400:  # 400: the container has not started, so no lines yet
                raise HTTPException(502, describe_failure(err, conn_id)) from None
            text = ""
        except Exception as err:
            raise HTTPException(502, describe_failure(err, conn_id)) from None
        cursor = LogCursor()
        lines = list(ui_logs.read_lines(text, cursor))
        return {
            "lines": lines,
            "cursor": ui_logs.encode_cursor(pod["metadata"]["uid"], cursor),
            "source": "pod",
            "finished": (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        }

    @app.get("/api/logs/stream", dependencies=logs_readable)
    async def logs_stream(
        request: Request,
        query: Task,
        replica: str,
        cursor: str | None = None,
        tail: Annotated[int, Query(ge=1, le=MAX_TAIL)] = DEFAULT_TAIL,
    ) -> StreamingResponse:
        found = await locate(query)
        pod = found.pod(replica)
        if pod is None or found.kind is None:
            why = found.plain["detail"] if found.plain else f"no pod of {replica} (any more)"
            return _events(ui_logs.ended(why))
        meta = pod["metadata"]
        start = ui_logs.decode_cursor(request.headers.get("last-event-id") or cursor, meta["uid"])
        container = container_name(pod, found.kind.default_container)
        hook = HOOKS.get(found.record.conn_id)
        return _events(
            ui_logs.stream(hook, found.namespace, meta["name"], meta["uid"], container, start, tail)
        )

    @app.get("/static/main.umd.cjs")
    async def bundle() -> FileResponse:
        if not BUNDLE.is_file():
            raise HTTPException(
                404, "The Training tab's bundle was not built (plugins/www/dist/main.umd.cjs)."
            )
        return FileResponse(BUNDLE, media_type="text/javascript")

    return app


# The saved lines are an XCom of the task: reading them demands what Airflow's XCom reads demand.
_XCOM_READABLE = requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM)


async def saved_lines(found: Found, replica: str, request: Request, user: BaseUser) -> dict[str, Any]:
    """The last lines the trigger saved for ``replica`` (its pod is gone or cannot be read), for a caller who
    may read the task's XComs (else 403); else 404, or 502 when the cluster cannot be read."""
    tails = found.record.saved_tails.values()
    saved = next((s for s in tails if isinstance(s, dict) and s.get("replica") == replica), None)
    if saved is None:
        if found.plain is not None and found.plain["view"] == "cluster_error":
            raise HTTPException(502, found.plain["detail"])
        raise HTTPException(404, f"No pod of replica {replica} and no saved lines of it for this try.")
    await run_in_threadpool(_XCOM_READABLE, request, user)
    lines = [{"time": None, "text": str(text)} for text in saved.get("lines") or []]
    return {"lines": lines, "cursor": None, "source": "saved", "finished": True}


def _events(body: Any) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)

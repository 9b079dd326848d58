"""Where a deferred task's replica logs stopped, kept in its task instance's XCom across triggerer restarts.

A trigger's streamer keeps a cursor per pod (:class:`~airflow_provider_training.log_cursor.LogCursor`).
:class:`LogPosition` saves those cursors under the XCom key ``training_log_position`` of the trigger's own
task instance, through the Task SDK comms the triggerer gives triggers (``XCom.aset`` / ``XCom.aget_one``),
so the trigger instance a restarted (or another) triggerer starts goes on after the last line instead of
from the start. The pods' last lines (bounded: ``ReplicaLogStreamer.saved_tails``) are saved with them, for
the Training tab of the Airflow UI once the pods are gone (``docs/ui-tab.md``).

Saving is debounced, one metadata-database write at a time in a task of its own (the event loop is never
blocked): once at the start (by :meth:`LogPosition.load`, before a line is emitted), when a pod's lines
start (a new pod in the cursors), then every :data:`SAVE_SECONDS` while the trigger runs, and one last write
when the trigger ends, is cancelled or its triggerer shuts down. A write carries the cursors of
:data:`SETTLE_SECONDS` before it, so every line it counts has had that long to reach the log file (lines and
requests travel on different sockets). A triggerer killed without notice (SIGKILL, a lost node) saves
nothing at the end: the next trigger then re-reads from the last write, so lines emitted up to about
``SAVE_SECONDS + SETTLE_SECONDS`` before the kill may appear again; they are marked with
:data:`~airflow_provider_training.logs.REPEAT_MARK` and a note says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_training.log_cursor import stamp_text

XCOM_KEY = "training_log_position"
Tails = Callable[[], dict[str, Any] | None]
SAVE_SECONDS = 30.0  # the most a crash may replay; one write per streaming trigger per interval
SETTLE_SECONDS = 1.0  # how old the cursors a write carries are (their lines have reached the log file)
# A new triggerer's first request starts its in-process execution API: tens of seconds on a busy machine.
LOAD_TIMEOUT = 300.0  # streaming from the start instead would repeat every line
SAVE_TIMEOUT = 30.0
FINAL_SAVE_TIMEOUT = 2.0  # at shutdown the triggerer's comms reader is gone: the write goes, no reply comes


NOT_YET: dict[str, Any] = {"cursors": None}  # a try's position before its trigger first saves one


def store_not_yet(context: Any) -> None:
    """Before a try's deferral (a try defers once), store :data:`NOT_YET` as its position: the trigger's
    first read then finds the XCom. An absent one is a 404 that the triggerer's execution-API client logs
    as ``ERROR XCom not found`` on every first start of a trigger."""
    context["ti"].xcom_push(key=XCOM_KEY, value=NOT_YET)


def xcom_address(ti: Any) -> dict[str, Any]:
    """The XCom arguments that name ``ti``'s own XComs."""
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}


class LogPosition:
    """Loads and saves one trigger's log cursors; ``ti`` is the trigger's ``task_instance``."""

    def __init__(self, ti: Any, log: Any) -> None:
        self.ti = ti
        self.log = log
        self._saved: dict[str, Any] | None = None
        self._warned = False

    def _where(self) -> dict[str, Any]:
        return xcom_address(self.ti)

    async def load(self) -> tuple[dict[str, Any] | None, int | None]:
        """The cursors saved by an earlier trigger of this try, and up to which line time (ns) lines may
        repeat (``None`` when that trigger saved its last position). They are saved again at once as this
        trigger's start (not final), before it emits a line: if it is killed before its next write, the
        next trigger marks what it may have emitted."""
        from airflow.sdk.execution_time.xcom import XCom

        try:
            saved = await asyncio.wait_for(XCom.aget_one(key=XCOM_KEY, **self._where()), LOAD_TIMEOUT)
        except Exception as err:
            self.log.warning(
                "Could not read the saved log position (%s: %s); streaming from the start",
                type(err).__name__,
                err,
            )
            return None, None
        resume, until = self._resumed(saved)
        tails = saved.get("tails") if isinstance(saved, dict) else None
        await self._save(resume or {}, final=False, tails=tails if isinstance(tails, dict) else None)
        return resume, until

    def _resumed(self, saved: Any) -> tuple[dict[str, Any] | None, int | None]:
        if not isinstance(saved, dict) or not isinstance(saved.get("cursors"), dict):
            return None, None  # NOT_YET: the trigger's first start
        if saved.get("final"):
            self.log.info("Resuming the replica logs where the previous trigger stopped")
            return saved["cursors"], None
        until = int(saved.get("saved_at") or 0) + int((SAVE_SECONDS + 2 * SETTLE_SECONDS) * 1e9)
        self.log.warning(
            "Resuming the replica logs after a triggerer that stopped without saving its position: lines "
            "stamped up to %s may appear twice; they are marked '(may repeat)'",
            stamp_text(until),
        )
        return saved["cursors"], until

    async def keep(self, cursors: Callable[[], dict[str, Any] | None], tails: Tails = dict) -> None:
        """Save the cursors of :data:`SETTLE_SECONDS` ago when a pod's lines start and every
        :data:`SAVE_SECONDS` (so the mark window of a crash stays that short), and once at the start unless
        :meth:`load` saved already; runs until cancelled.
        ``tails``: the pods' last lines, saved alongside (what the Training tab shows once pods are gone)."""
        previous = cursors()
        saved_pods = None if self._saved is None else set(self._saved["cursors"])  # None: nothing saved yet
        ticks, period = 0, round(SAVE_SECONDS / SETTLE_SECONDS)
        while True:
            await asyncio.sleep(SETTLE_SECONDS)
            ticks += 1
            current = cursors()
            if previous is not None and (
                saved_pods is None or ticks >= period or not previous.keys() <= saved_pods
            ):
                await self._save(previous, final=False, tails=tails())
                saved_pods, ticks = set(previous), 0
            previous = current

    async def save_final(self, cursors: dict[str, Any] | None, tails: dict[str, Any] | None = None) -> None:
        """The last write: every line counted has been emitted (the trigger ended or was cancelled)."""
        if cursors is not None and not self._is_saved(cursors, final=True):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._save(cursors, final=True, tails=tails), FINAL_SAVE_TIMEOUT)

    def _is_saved(self, cursors: dict[str, Any], *, final: bool) -> bool:
        return self._saved == {"cursors": cursors, "final": final}

    async def _save(
        self, cursors: dict[str, Any], *, final: bool, tails: dict[str, Any] | None = None
    ) -> None:
        from airflow.sdk.execution_time.xcom import XCom

        value = {"cursors": cursors, "final": final, "saved_at": time.time_ns(), "tails": tails or {}}
        try:
            await asyncio.wait_for(XCom.aset(key=XCOM_KEY, value=value, **self._where()), SAVE_TIMEOUT)
        except Exception as err:
            if not self._warned:
                self._warned = True
                self.log.warning(
                    "Could not save the log position (%s: %s); a restart may repeat lines",
                    type(err).__name__,
                    err,
                )
            return
        self._saved = {"cursors": cursors, "final": final}

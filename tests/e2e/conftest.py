"""A real Airflow deployment for end-to-end tests: api-server, scheduler (LocalExecutor), dag-processor and
triggerer as subprocesses on a temporary SQLite AIRFLOW_HOME, with ``kubernetes_default`` pointing at a
localkube (scripted runtime) started here.

Every component binds 127.0.0.1 on a free port (the log servers are not started: the tests read the log
files). The REST API needs no login (``simple_auth_manager_all_admins``). Each component runs in its own
process group, which the finalizer terminates (then kills), also when a test or the start-up fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json

DAG_FILES = Path(__file__).parent / "dag_files"
COMPONENTS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
ON_KILL_TIMEOUT = 10  # [triggerer] on_kill_timeout: how long BaseTrigger.on_kill() may take
START_TIMEOUT = 180.0  # a busy 2-core machine needs minutes to start four components
REQUEST_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def airflow_env(home: Path, api_port: int, connection: str) -> dict[str, str]:
    """The test process's environment without its Airflow and Kubernetes settings, plus this deployment's
    (``connection``: the ``kubernetes_default`` connection's JSON)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")) and k not in ("KUBECONFIG",)
    }
    base_url = f"http://127.0.0.1:{api_port}"
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",  # the kill matrix runs its sync tasks side by side
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            # Runs are triggered by the tests only: a scheduled run (the examples have schedules) would hold
            # a DAG's one active run and keep the triggered ones queued.
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": base_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": "e2e-only",
            "AIRFLOW__API_AUTH__JWT_SECRET": "e2e-only-jwt-secret-of-enough-length",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT": str(ON_KILL_TIMEOUT),
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",  # a busy api-server must not fail task starts
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": connection,
        }
    )
    return env


@dataclass
class Airflow:
    """The running deployment: its REST API (``/api/v2``), its AIRFLOW_HOME and each component's output."""

    home: Path
    base_url: str
    env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    login: tuple[str, str] | None = None  # (user, password) for the REST API when not everyone is admin
    token: str | None = None  # the login's JWT, fetched on the first request

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call the REST API. A 5xx answer (the api-server's SQLite busy on a loaded machine), and a GET that
        timed out, are asked again twice, as a user clicks again; the last one fails with the api-server's
        traceback. A write that timed out is not sent again (it may have been applied)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.login is not None:
            headers["Authorization"] = f"Bearer {self.bearer_token()}"
        for attempt in range(REQUEST_ATTEMPTS):
            req = urllib.request.Request(
                f"{self.base_url}/api/v2{path}", data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as err:
                if err.code < 500:
                    raise
                tail = "\n".join(self.output("api-server").splitlines()[-60:])
                print(f"{method} {path}: HTTP {err.code} (attempt {attempt + 1}); api-server:\n{tail}")
                if attempt == REQUEST_ATTEMPTS - 1:
                    raise AssertionError(f"{method} {path}: HTTP {err.code}\n{tail}") from err
                time.sleep(1.0)
            except (TimeoutError, urllib.error.URLError) as err:
                timed_out = isinstance(err, TimeoutError) or isinstance(err.reason, TimeoutError)
                if not timed_out or method != "GET" or attempt == REQUEST_ATTEMPTS - 1:
                    raise
                print(f"{method} {path}: timed out (attempt {attempt + 1}); asking again")
        raise AssertionError("unreachable")

    def bearer_token(self) -> str:
        """The JWT of ``login`` from SimpleAuthManager's ``POST /auth/token`` (fetched once)."""
        if self.token is None:
            assert self.login is not None
            user, password = self.login
            body = json.dumps({"username": user, "password": password}).encode()
            req = urllib.request.Request(
                f"{self.base_url}/auth/token",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                self.token = str(json.loads(resp.read())["access_token"])
        return self.token

    def trigger(self, dag_id: str, run_id: str) -> None:
        self.request("POST", f"/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None})

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def mark_failed(self, dag_id: str, run_id: str, task_id: str) -> None:
        """What a user does in the UI ("Mark as failed"); a deferred task's trigger then gets on_kill()."""
        self.set_state(dag_id, run_id, task_id, "failed")

    def set_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        """What "Mark as failed" / "Mark as success" in the UI does."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        self.request("PATCH", path, {"new_state": state})

    def clear(self, dag_id: str, run_id: str, task_id: str) -> None:
        """What "Clear" in the UI does: the running or deferred try ends and the task is scheduled again."""
        body = {"dry_run": False, "only_failed": False, "task_ids": [task_id], "dag_run_id": run_id}
        self.request("POST", f"/dags/{dag_id}/clearTaskInstances", body)

    def start(self, name: str) -> None:
        """Start component ``name`` (a key of COMPONENTS) in its own process group; output appended."""
        with (self.home / f"{name}.out").open("ab") as out:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", *COMPONENTS[name]],
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped as a whole
            )

    def stop(self, name: str, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Send ``sig`` to component ``name``'s process group and wait for its leader to exit (SIGKILL after
        ``timeout``); the component is then absent until :meth:`start`."""
        process = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # children left behind by a leader that exited

    def task_dir(self, dag_id: str, run_id: str, task_id: str) -> Path:
        return self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"

    def trigger_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The triggerer's log of the task's trigger (``attempt=1.log.trigger.<triggerer id>.log``)."""
        files = sorted(self.task_dir(dag_id, run_id, task_id).glob("attempt=1.log.trigger.*.log"))
        return "".join(f.read_text() for f in files)

    def output(self, name: str) -> str:
        return (self.home / f"{name}.out").read_text(errors="replace")

    def diagnostics(self) -> str:
        """The tail of every component's output, for a failure message."""
        parts = []
        for name, process in self.processes.items():
            tail = "\n".join(self.output(name).splitlines()[-15:])
            parts.append(f"--- {name} (exit {process.poll()}) ---\n{tail}")
        return "\n".join(parts)

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        """Poll ``check`` until it returns something truthy; fail with the components' output if it never
        does (or if a component died)."""
        end = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            dead = [name for name, p in self.processes.items() if p.poll() is not None]
            if dead or time.monotonic() > end:
                why = f"{', '.join(dead)} exited" if dead else f"not within {timeout:.0f} s"
                pytest.fail(f"waiting for {what}: {why}\n{self.diagnostics()}")
            time.sleep(0.2)

    def send(self, name: str, sig: signal.Signals) -> None:
        """Send ``sig`` to component ``name``'s process group without waiting for it (see :meth:`reap`)."""
        os.killpg(self.processes[name].pid, sig)

    def reap(self, name: str, timeout: float = 30.0) -> None:
        """Wait for component ``name``, signalled by :meth:`send`, to exit (SIGCONT changes nothing for a
        process that runs or exits, so :meth:`stop` only waits, and kills after ``timeout``)."""
        self.stop(name, signal.SIGCONT, timeout)

    def start_another(self, name: str, component: str) -> None:
        """Start one more ``component`` (a key of COMPONENTS) under ``name``, say a second triggerer to take
        over from the first."""
        COMPONENTS[name] = COMPONENTS[component]
        try:
            self.start(name)
        finally:
            del COMPONENTS[name]

    def trigger_log_files(self, dag_id: str, run_id: str, task_id: str) -> list[Path]:
        """The task's trigger log files, one per triggerer that ran its trigger, oldest triggerer first."""
        files = self.task_dir(dag_id, run_id, task_id).glob("attempt=1.log.trigger.*.log")
        return sorted(files, key=lambda f: int(f.name.split(".")[-2]))


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM every component's process group (workers and supervisors included), SIGKILL stragglers."""
    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    end = time.monotonic() + 15
    for process in processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, end - time.monotonic()))
    for process in processes.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # also children left behind by a leader that exited
        process.wait()


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """localkube (scripted runtime) in a thread of the test process, its kubeconfig in a temporary dir."""
    cluster = LocalKube(runtime="scripted")
    with cluster:
        cluster.write_kubeconfig(tmp_path_factory.mktemp("e2e-kube") / "kubeconfig")
        yield cluster


@pytest.fixture(scope="module")
def airflow(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """The four Airflow components, started on a migrated SQLite DB with ``dag_files`` as the DAGs; ready
    once the API answers and every DAG is parsed."""
    with deploy(kube, tmp_path_factory, DAG_FILES) as deployment:
        yield deployment


class DeployOptions(TypedDict, total=False):
    start_timeout: float
    env: Mapping[str, str] | None
    login: tuple[str, str] | None


@contextlib.contextmanager
def deploy(
    kube: LocalKube,
    tmp_path_factory: pytest.TempPathFactory,
    dag_folder: Path,
    **options: Unpack[DeployOptions],
) -> Iterator[Airflow]:
    """The deployment of the ``airflow`` fixture on ``kube`` (see :func:`deploy_for`)."""
    assert kube.kubeconfig is not None
    with deploy_for(connection_json(kube.kubeconfig), tmp_path_factory, dag_folder, **options) as deployment:
        yield deployment


@contextlib.contextmanager
def deploy_for(
    connection: str,
    tmp_path_factory: pytest.TempPathFactory,
    dag_folder: Path,
    start_timeout: float = START_TIMEOUT,
    env: Mapping[str, str] | None = None,
    login: tuple[str, str] | None = None,
) -> Iterator[Airflow]:
    """Airflow with a copy of ``dag_folder`` as its DAGs folder (more files take longer to parse:
    ``start_timeout``) and ``connection`` as its ``kubernetes_default`` (the connection's JSON: localkube's,
    or a real API server's with a ServiceAccount's kubeconfig and namespace); ``env`` overrides settings,
    and ``login`` is the user the REST calls log in as (needed once ``env`` turns off
    ``simple_auth_manager_all_admins``)."""
    deployment = migrated(connection, tmp_path_factory, dag_folder, env, login)
    try:
        for name in COMPONENTS:
            deployment.start(name)
        files = {p.name for p in (deployment.home / "dags").glob("*.py")}
        deployment.wait("the API and the parsed DAGs", lambda: files <= _parsed(deployment), start_timeout)
        deployment.wait("the triggerer to start", lambda: _triggerer_started(deployment), start_timeout)
        yield deployment
    finally:
        _stop(deployment.processes)


def migrated(
    connection: str,
    tmp_path_factory: pytest.TempPathFactory,
    dag_folder: Path,
    env: Mapping[str, str] | None = None,
    login: tuple[str, str] | None = None,
) -> Airflow:
    """A fresh AIRFLOW_HOME with a copy of ``dag_folder`` as its DAGs and a migrated SQLite DB, no component
    started yet (see :func:`deploy_for` for the arguments)."""
    home = tmp_path_factory.mktemp("e2e-airflow")
    shutil.copytree(dag_folder, home / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    api_port = free_port()
    settings = {**airflow_env(home, api_port, connection), **(env or {})}
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=settings,
        cwd=home,
        capture_output=True,
        text=True,
    )
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    with contextlib.closing(sqlite3.connect(home / "airflow.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")  # kept in the file: readers no longer block the writers
    return Airflow(home, f"http://127.0.0.1:{api_port}", settings, login=login)


def _parsed(airflow: Airflow) -> set[str]:
    """The names of the DAG files the dag-processor has parsed into at least one DAG."""
    try:
        dags = airflow.request("GET", "/dags?limit=1000")["dags"]
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return set()
    return {Path(dag["fileloc"]).name for dag in dags}


def _triggerer_started(airflow: Airflow) -> bool:
    return "Starting the triggerer" in airflow.output("triggerer")

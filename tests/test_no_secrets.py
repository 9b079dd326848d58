"""No secrets in logs: Secret-sourced env values, the cluster token and kubeconfig contents never reach what a
task shows (its log, its XCom, its error).

Every test runs real operators against localkube over HTTP (the process runtime, so a replica's env really
holds the Secret's value) and captures everything a task run could show:

- every stdlib log record at DEBUG, of every logger (ours, the clients', Airflow's, localkube's);
- every structlog entry at DEBUG (the operator's and the trigger's ``self.log``: state changes, replica table,
  streamed replica logs, stuck warnings), with exceptions rendered;
- whatever reaches stdout/stderr;
- the XCom values, the trigger's serialized kwargs (stored in the metadata DB), the trigger event, and a
  failed task's exception with its full traceback.

Each test first proves the secret is there to leak (it is in the Secret, in the replica process's env, in the
kubeconfig the connection points at) and that the capture saw the channels it checks (replica log lines, the
replica table, retry messages), so none can pass by capturing nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import traceback
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from localkube.cluster import LocalKube
from localkube.kubeconfig import write_kubeconfig
from structlog.testing import LogCapture

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.results import TrainingJobError
from airflow_provider_training.specs import build_job
from tests.operators.harness import first_event, in_thread, make_context, run_operator, wait_for

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine

NAMESPACE = "default"
SECRET_KEY = "api-key"
ENV_NAME = "TRAINING_API_KEY"
MODES = ["sync", "deferrable"]
FRAGMENT = 12  # this many consecutive characters of a token or Secret value count as a leak
CONNECTIONS = ["kube_config_path", "kube_config"]

# The replica's command: it reads the Secret's value from its env and proves it had it by writing it to a file
# (outside the log); it prints only non-secret lines. The master fails when FAIL_MASTER is set.
# The master decides a PyTorchJob: it ends only once the worker has written its proof (a gate, bounded as a
# guard against hanging), so the job cannot succeed before every replica has shown what its env held.
TRAINING_SCRIPT = """
import os, sys, time
value = os.environ["TRAINING_API_KEY"]
proof = os.path.join(sys.argv[1], os.environ["HOSTNAME"])
with open(proof + ".part", "w") as handle:
    handle.write(value)
os.rename(proof + ".part", proof)  # whole or absent, for the master's check and the test's read
print("epoch 1 loss 0.42 (credentials: %d characters)" % len(value), flush=True)
if os.environ.get("FAIL_MASTER") and "-master-" in os.environ["HOSTNAME"]:
    print("cannot reach the data service, giving up", flush=True)
    sys.exit(3)
worker = os.path.join(sys.argv[1], os.environ["HOSTNAME"].replace("-master-", "-worker-"))
for _ in range(6000):
    if os.path.exists(worker):
        break
    time.sleep(0.05)
print("epoch 2 loss 0.17", flush=True)
"""


# -- capturing everything a task shows ---------------------------------------------------------------------


@dataclass
class TaskOutput:
    """Every channel through which a task run shows text, by name."""

    caplog: pytest.LogCaptureFixture
    capfd: pytest.CaptureFixture[str]
    structlog_entries: list[MutableMapping[str, Any]]
    values: dict[str, str] = field(default_factory=dict)
    _fd: str = ""

    def add(self, channel: str, value: Any) -> None:
        """Something else the task shows (XCom, trigger kwargs, exception): kept as text."""
        text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
        self.values[channel] = self.values.get(channel, "") + text + "\n"

    def add_error(self, err: BaseException) -> None:
        """A failed task's exception as the task log shows it (traceback, chained causes), and its event."""
        self.add("exception", "".join(traceback.format_exception(err)))
        if isinstance(err, TrainingJobError):
            self.add("exception event", err.event)

    def channels(self) -> dict[str, str]:
        out = self.capfd.readouterr()
        self._fd += out.out + out.err
        return {
            "stdlib logging": self.caplog.text,
            "structlog (self.log)": "\n".join(_render(entry) for entry in self.structlog_entries),
            "stdout/stderr": self._fd,
            **self.values,
        }

    def text(self) -> str:
        return "\n".join(self.channels().values())

    def assert_free_of(self, forbidden: dict[str, Forbidden]) -> None:
        """None of the ``forbidden`` values (by description) appears in any channel, not even in part."""
        leaks = [
            f"{what} in {channel} at offset {offset}"
            for channel, text in self.channels().items()
            for what, value in forbidden.items()
            if (offset := value.find_in(text)) is not None
        ]
        assert not leaks, "secrets leaked: " + "; ".join(leaks)


@dataclass(frozen=True)
class Forbidden:
    """A value that must not be shown. A high-entropy one (token, Secret value) must not be shown even in
    part: any ``FRAGMENT`` consecutive characters of it count (error messages quote lines cut short)."""

    value: str
    partial: bool = True

    def __post_init__(self) -> None:
        assert len(self.value) > FRAGMENT, "a short forbidden value would make the check weak or vacuous"

    def find_in(self, text: str) -> int | None:
        parts = (
            [self.value[i : i + FRAGMENT] for i in range(len(self.value) - FRAGMENT + 1)]
            if self.partial
            else [self.value]
        )
        return next((text.index(part) for part in parts if part in text), None)


def _render(entry: MutableMapping[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in entry.items())


@pytest.fixture
def output(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> Iterator[TaskOutput]:
    """Captures every logger at DEBUG (stdlib and structlog) for the test's duration."""
    saved = _all_loggers_at_debug(caplog)
    capture = LogCapture()
    config = structlog.get_config()
    structlog.configure(
        processors=[structlog.processors.format_exc_info, capture],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    try:
        yield TaskOutput(caplog, capfd, capture.entries)
    finally:
        structlog.configure(**config)
        for logger, (level, handlers) in saved.items():
            logger.setLevel(level)
            logger.handlers[:] = handlers


def _all_loggers_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> dict[logging.Logger, tuple[int, list[logging.Handler]]]:
    """Root and every existing logger at DEBUG; non-propagating loggers get the capture handler too."""
    caplog.set_level(logging.DEBUG)
    saved = {}
    for logger in logging.root.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            saved[logger] = (logger.level, list(logger.handlers))
            if logger.level > logging.DEBUG:
                logger.setLevel(logging.DEBUG)
            if not logger.propagate:
                logger.addHandler(caplog.handler)
    return saved


# -- the cluster, the connection, the Secret -----------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    kube: LocalKube
    kubeconfig: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """localkube with the process runtime: a replica's command runs with its env resolved from Secrets."""
    with LocalKube(runtime="process") as kube:
        yield Cluster(kube, kube.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig"))


def use_connection(
    monkeypatch: pytest.MonkeyPatch, how: str, kubeconfig: Path, url: str, token: str
) -> dict[str, Forbidden]:
    """Point ``kubernetes_default`` at ``kubeconfig`` by path, or inline (the whole YAML as the extra
    ``kube_config``).

    Returns what must never be shown: the token and the kubeconfig's contents (checked to hold the token).
    """
    text = kubeconfig.read_text()
    assert yaml.safe_load(text)["users"][0]["user"]["token"] == token
    assert yaml.safe_load(text)["clusters"][0]["cluster"]["server"] == url
    extra = {"kube_config_path": str(kubeconfig)} if how == "kube_config_path" else {"kube_config": text}
    conn = json.dumps({"conn_type": "kubernetes", "extra": {**extra, "namespace": NAMESPACE}})
    assert (token in conn) == (how == "kube_config")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", conn)
    return {
        "the bearer token": Forbidden(token),
        "the kubeconfig's contents": Forbidden(text, partial=False),
        "the connection": Forbidden(conn, partial=False),
    }


@pytest.fixture(params=CONNECTIONS)
def credentials(
    request: pytest.FixtureRequest, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Forbidden]:
    return use_connection(
        monkeypatch, request.param, cluster.kubeconfig, cluster.kube.url, cluster.kube.token
    )


def create_secret(kubeconfig: Path, name: str, value: str) -> dict[str, Forbidden]:
    """Create an Opaque Secret through the real ``kubernetes`` client, read it back, and return the forbidden
    forms of its value (plain and base64, as ``data`` holds it).

    Bodies are not preloaded, so the client's DEBUG ``response body`` log (the test's own) stays out.
    """
    from kubernetes import client, config

    encoded = base64.b64encode(value.encode()).decode()
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {SECRET_KEY: encoded}}
    with config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespaced_secret(NAMESPACE, body, _preload_content=False)
        stored = json.loads(core.read_namespaced_secret(name, NAMESPACE, _preload_content=False).data)
    assert base64.b64decode(stored["data"][SECRET_KEY]).decode() == value
    return {"the Secret's value": Forbidden(value), "the Secret's value in base64": Forbidden(encoded)}


def secret_value() -> str:
    return "s3cr3t-" + secrets.token_urlsafe(18)


@dataclass(frozen=True)
class PlantedSecret:
    """A Secret in the cluster, and everything a test must not show: its value and the credentials."""

    name: str
    value: str
    forbidden: dict[str, Forbidden]


@pytest.fixture
def planted(cluster: Cluster, credentials: dict[str, Forbidden]) -> PlantedSecret:
    name, value = f"credentials-{secrets.token_hex(4)}", secret_value()
    return PlantedSecret(name, value, {**create_secret(cluster.kubeconfig, name, value), **credentials})


def training_job(secret_name: str, proof_dir: Path, *, fail_master: bool = False) -> dict[str, Any]:
    """A PyTorchJob (master + worker) whose replicas get ``TRAINING_API_KEY`` through ``secretKeyRef``."""
    env: list[dict[str, Any]] = [
        {"name": ENV_NAME, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": SECRET_KEY}}}
    ]
    if fail_master:
        env.append({"name": "FAIL_MASTER", "value": "1"})
    return build_job(
        "PyTorchJob",
        "python:3.11",
        ["python", "-c", TRAINING_SCRIPT, str(proof_dir)],
        {"Master": 1, "Worker": 1},
        env=env,
        restart_policy="Never",
    )


def operator(job: dict[str, Any]) -> PyTorchJobOperator:
    return PyTorchJobOperator(task_id="train", job=job, log_replicas="all", check_interval=0.2)


def run_task(op: PyTorchJobOperator, mode: str, output: TaskOutput) -> Any:
    """Run ``op`` as Airflow would in ``mode`` (the operator tests' way); everything it shows besides logs
    goes to ``output``: the trigger's serialized kwargs, the event, the XComs, the result or the error."""
    defer, complete = op.defer, op._complete

    def recording_defer(**kwargs: Any) -> None:
        output.add("trigger kwargs", kwargs["trigger"].serialize())
        defer(**kwargs)

    def recording_complete(event: Any, hook: Any) -> Any:  # the event of both modes, as its payload
        output.add("trigger event", event.to_payload())
        return complete(event, hook)

    op.defer = recording_defer  # type: ignore[method-assign, assignment]
    op._complete = recording_complete  # type: ignore[method-assign]
    context = make_context()
    try:
        result = run_operator(op, context, mode)
    except Exception as err:
        output.add_error(err)
        raise
    finally:
        output.add("xcom", context["ti"].xcoms)
    output.add("xcom return_value", result)
    return result


def proof_of_env(proof_dir: Path) -> dict[str, str]:
    """What each replica process found in its env (it wrote the value to a file named after its pod)."""
    return {path.name: path.read_text() for path in proof_dir.iterdir() if path.suffix != ".part"}


# -- success ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_success_shows_no_secret(
    mode: str, planted: PlantedSecret, output: TaskOutput, tmp_path: Path
) -> None:
    result = run_task(operator(training_job(planted.name, tmp_path)), mode, output)

    assert result["state"] == "Succeeded"
    env_seen = proof_of_env(tmp_path)
    assert sorted(env_seen) == sorted(result["pods"]) and len(env_seen) == 2
    assert set(env_seen.values()) == {planted.value}, (
        "every replica process had the Secret's value in its env"
    )
    shown = output.text()
    for line in (
        "[master-0] epoch 2 loss 0.17",
        "[worker-0] epoch 1 loss 0.42",
        "TYPE",
        "DESIRED",
        "is Succeeded",
    ):
        assert line in shown, f"the capture missed {line!r}"
    assert "trigger event" in output.values and (mode == "sync" or "trigger kwargs" in output.values)
    output.assert_free_of(planted.forbidden)


# -- failure: a stuck replica (its Secret is missing), then a failing master --------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_failure_message_and_diagnostics_show_no_secret(
    mode: str, cluster: Cluster, credentials: dict[str, Forbidden], output: TaskOutput, tmp_path: Path
) -> None:
    """The Secret appears only after the replicas were stuck (CreateContainerConfigError events, the stuck
    warning); then the master reads it and exits 3: the error names exit code, last log lines and events."""
    name = f"late-credentials-{secrets.token_hex(4)}"
    value = secret_value()
    op = operator(training_job(name, tmp_path, fail_master=True))
    thread, outcome = in_thread(lambda: run_task(op, mode, output))
    try:
        wait_for(lambda: any("is stuck" in str(e.get("event")) for e in output.structlog_entries))
        forbidden = {**create_secret(cluster.kubeconfig, name, value), **credentials}
    finally:
        thread.join(timeout=25)
    assert not thread.is_alive()

    err = outcome.get("error")
    assert isinstance(err, TrainingJobError), outcome
    message = str(err)
    for part in (
        "exit code 3",
        "cannot reach the data service",
        "Recent warning events",
        f'"{name}" not found',
    ):
        assert part in message, f"the failure message lacks {part!r}"
    master = next(pod for pod in proof_of_env(tmp_path) if "-master-" in pod)
    assert proof_of_env(tmp_path)[master] == value, "the failing master had the Secret's value in its env"
    assert "CreateContainerConfigError" in output.text()
    output.assert_free_of(forbidden)


# -- transient API errors: retry.py logs each one ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_retried_api_errors_show_no_secret(
    mode: str, cluster: Cluster, planted: PlantedSecret, output: TaskOutput, tmp_path: Path
) -> None:
    faults = cluster.kube.faults
    faults.fail(503, 1, method="GET", resource="pytorchjobs")  # the submitter's lookup of an earlier try
    faults.throttle(1, retry_after=0, method="POST", resource="pytorchjobs")  # the create

    try:
        result = run_task(operator(training_job(planted.name, tmp_path)), mode, output)
    finally:
        faults.clear()

    assert result["state"] == "Succeeded"
    retries = [r.getMessage() for r in output.caplog.records if r.name.endswith("hooks.retry")]
    assert any("503" in m for m in retries) and any("429" in m for m in retries), retries
    assert set(proof_of_env(tmp_path).values()) == {planted.value}
    output.assert_free_of(planted.forbidden)


# -- bad credentials: 401 ------------------------------------------------------------------------------------


@pytest.fixture(params=CONNECTIONS)
def wrong_credentials(
    request: pytest.FixtureRequest, cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, Forbidden]:
    """A connection with a wrong token (by path or inline); the wrong and the real token are secret."""
    wrong = "wrong-" + secrets.token_urlsafe(18)
    path = write_kubeconfig(tmp_path / "wrong.kubeconfig", cluster.kube.url, wrong)
    return {
        **use_connection(monkeypatch, request.param, path, cluster.kube.url, wrong),
        "the cluster's real token": Forbidden(cluster.kube.token),
    }


def test_unauthorized_submission_error_shows_no_token(
    cluster: Cluster, wrong_credentials: dict[str, Forbidden], output: TaskOutput, tmp_path: Path
) -> None:
    seen = len(cluster.kube.requests)
    with pytest.raises(Exception) as raised:
        run_task(operator(training_job("unused", tmp_path)), "sync", output)

    assert getattr(raised.value, "status", None) == 401, raised.value
    assert "401" in str(raised.value)
    assert any(r.status == 401 for r in cluster.kube.requests[seen:]), "the request reached the cluster"
    output.assert_free_of(wrong_credentials)


def test_unauthorized_trigger_event_shows_no_token(
    cluster: Cluster, wrong_credentials: dict[str, Forbidden], output: TaskOutput
) -> None:
    """The trigger (triggerer side) with bad credentials: an ``error`` event and a logged error."""
    from airflow_provider_training.triggers.training import TrainingJobTrigger

    trigger = TrainingJobTrigger(
        kind="PyTorchJob",
        api_version="kubeflow.org/v1",
        job_name="any",
        namespace=NAMESPACE,
        check_interval=0.2,
    )
    event = first_event(trigger)
    output.add("trigger event", event)

    assert event["status"] == "error" and "401" in event["message"], event
    assert any("401" in str(e.get("event")) for e in output.structlog_entries), "the failure was logged"
    output.assert_free_of(wrong_credentials)


# -- a malformed inline kubeconfig ---------------------------------------------------------------------------


def test_malformed_inline_kubeconfig_error_shows_no_token(
    cluster: Cluster, output: TaskOutput, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kubeconfig pasted with a tab before ``token:`` does not parse; the error must not quote it."""
    text = cluster.kubeconfig.read_text()
    broken = text.replace("    token:", "\ttoken:")
    assert broken != text and cluster.kube.token in broken
    conn = {"conn_type": "kubernetes", "extra": {"kube_config": broken}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(conn))

    with pytest.raises(ValueError, match="neither JSON nor YAML"):
        run_task(operator(training_job("unused", tmp_path)), "sync", output)
    output.assert_free_of(
        {
            "the bearer token": Forbidden(cluster.kube.token),
            "the kubeconfig's contents": Forbidden(broken, partial=False),
        }
    )


def test_capture_sees_what_it_checks(output: TaskOutput) -> None:
    """The capture itself: a value shown through any channel, even cut short, is found (so a clean result
    means something)."""

    def show_stdlib(text: str) -> None:
        logging.getLogger("airflow_provider_training.hooks.retry").debug("stdlib %s", text)

    def show_structlog(text: str) -> None:
        PyTorchJobOperator(task_id="t", job={}).log.debug("structlog %s", text)

    def show_exception(text: str) -> None:
        try:
            raise RuntimeError("bad credentials") from ValueError(text)
        except RuntimeError as err:
            output.add_error(err)

    channels: dict[str, Callable[[str], None]] = {
        "stdlib logging": show_stdlib,
        r"structlog \(self.log\)": show_structlog,
        "stdout/stderr": print,
        "exception": show_exception,
    }
    for channel, show in channels.items():
        value = secret_value()
        show(f"... {value[5 : 5 + FRAGMENT]} ...")
        with pytest.raises(AssertionError, match=f"the value in {channel} at"):
            output.assert_free_of({"the value": Forbidden(value)})

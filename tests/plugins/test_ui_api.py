"""The Training tab's HTTP API (docs/ui-tab.md) over real HTTP: Airflow's own api-server app (the plugin
mounted by the entry point, the SimpleAuthManager checking JWTs), served by uvicorn, a real metadata DB that
``dag.test()`` filled by running the real operator, and localkube.

The DAG (``dag_files/training_tab.py``) submits a PyTorchJob and returns (``wait_until=None``): the job's
master writes its lines and then holds at a gate until the last test opens it, so every intermediate state is
seen without betting on the machine's speed.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from localkube.cluster import LocalKube
from localkube.faults import FaultRule
from localkube.runtime import close_gate, open_gate

from airflow_provider_training.plugins import ui_api, ui_cluster, ui_logs
from tests.dags.conftest import DAG_FILES, airflow_db
from tests.e2e.dag_scoped_auth import NO_LOGS, NO_XCOM
from tests.operators.harness import cluster, wait_for
from tests.plugins.sse import sse_events

__all__ = ["airflow_db", "cluster"]

pytestmark = pytest.mark.timeout(300)

DAG_ID = "training_tab"
GATE = "training-tab-master"
LINKS = {
    "kubeflow": "https://kubeflow.example/#/{namespace}/{plural}/{name}",
    "tensorstack": "https://t9k/{name}",
}
AUTH_MANAGER = "tests.e2e.dag_scoped_auth.DagScopedSimpleAuthManager"


@pytest.fixture(scope="module")
def run_id(airflow_db: str, cluster: LocalKube) -> Iterator[str]:
    """One run of the DAG: the train task submitted its job (left running), the others as described."""
    close_gate(GATE)
    spec = importlib.util.spec_from_file_location(DAG_ID, DAG_FILES / f"{DAG_ID}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__TRAINING__JOB_URL_TEMPLATE", json.dumps(LINKS))
        run = module.dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["train"] == "success" and states["never_submitted"] == "upstream_failed"
    yield run.run_id
    open_gate(GATE)


@pytest.fixture(scope="module")
def server(run_id: str) -> Iterator[str]:
    """Airflow's api-server app with the SimpleAuthManager, served over HTTP; its base URL."""
    import uvicorn
    from airflow.api_fastapi.app import create_app, purge_cached_app

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", AUTH_MANAGER)
        mp.setenv(
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"viewer:viewer,{NO_LOGS}:viewer,{NO_XCOM}:viewer"
        )
        mp.setattr(ui_cluster.SNAPSHOTS, "ttl", 0.0)  # tests see each change at once; one test sets it back
        purge_cached_app()
        app = create_app(apps="core")
        # loop="asyncio": "auto" would install uvloop as the process-wide policy, outliving this module
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", loop="asyncio")
        uv = uvicorn.Server(config)
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        wait_for(lambda: uv.started)
        port = uv.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            uv.should_exit = True
            thread.join(30)
            purge_cached_app()


def token(role: str | None, username: str | None = None) -> str:
    """A JWT the real auth manager issues, as the UI's login does (``username`` defaults to the role)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username=username or role or "nobody", role=role)
    return get_auth_manager().generate_jwt(user)


SEEN: list[str] = []  # every response body, checked for secrets at the end


@pytest.fixture(scope="module")
def client(server: str) -> Iterator[httpx.Client]:
    """The tab as the browser runs it: same origin, the ``_token`` cookie the UI's login set."""
    with httpx.Client(base_url=server, cookies={"_token": token("viewer")}, timeout=60) as c:
        c.event_hooks["response"] = [keep_body]
        yield c


def keep_body(resp: httpx.Response) -> None:
    """Keep a response's body for the secrets check (event streams keep theirs as they are read)."""
    if "event-stream" not in resp.headers.get("content-type", ""):
        SEEN.append(resp.read().decode())


def ti(run_id: str, task_id: str = "train", **more: Any) -> dict[str, Any]:
    return {"dag_id": DAG_ID, "run_id": run_id, "task_id": task_id, **more}


def job_view(client: httpx.Client, run_id: str, **more: Any) -> dict[str, Any]:
    resp = client.get("/training/api/job", params=ti(run_id, **more))
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_running_job(client, run_id, cluster):
    view = wait_for(lambda: (v := job_view(client, run_id))["status"]["state"] == "Running" and v)
    job = cluster.store.get(
        cluster.store.resource_type("kubeflow.org", "v1", "pytorchjobs"), "default", view["job"]["name"]
    )
    assert "tab-env-secret-5b7f0c" in json.dumps(job)  # a value the tab must never show is there to leak

    assert view["view"] == "job"
    assert view["task"] == {"try_number": 1, "state": "success", "operator": "PyTorchJobOperator"}
    assert view["job"]["kind"] == "PyTorchJob" and view["job"]["api_version"] == "kubeflow.org/v1"
    assert view["job"]["namespace"] == "default" and view["job"]["uid"]
    assert view["job"]["link"] == f"https://kubeflow.example/#/default/pytorchjobs/{view['job']['name']}"
    assert view["status"]["finished"] is False and view["refresh_seconds"] == ui_cluster.REFRESH_SECONDS
    assert any(c["type"] == "Running" and c["status"] == "True" for c in view["status"]["conditions"])
    replicas = {r["type"]: r for r in view["replicas"]}
    assert replicas["Master"]["expected"] == 1 and replicas["Worker"]["expected"] == 1
    assert {p["replica"] for p in view["pods"]} == {"master-0", "worker-0"}
    sources = {(s["replica"], s["live"]) for s in view["log_sources"]}
    assert sources == {("master-0", True), ("worker-0", True)}
    assert view["warnings"] == []
    assert all(e["object"].startswith(("PyTorchJob/", "Pod/")) for e in view["events"])


def test_the_plain_views(client, run_id):
    other = job_view(client, run_id, task_id="report")
    assert other["view"] == "not_training" and "not an operator of the training provider" in other["detail"]

    never = job_view(client, run_id, task_id="never_submitted")
    assert never["view"] == "not_submitted" and never["task"]["state"] == "upstream_failed"
    assert never["refresh_seconds"] == ui_cluster.REFRESH_SECONDS and other["refresh_seconds"] is None

    for unknown in (ti(run_id, task_id="nope"), ti(run_id, try_number=2)):
        assert client.get("/training/api/job", params=unknown).status_code == 404


def test_a_refused_read_names_the_verb_and_resource(client, run_id, cluster):
    rule = cluster.faults.add(FaultRule(action="status", code=403, resource="pytorchjobs", count=None))
    try:
        view = job_view(client, run_id)
        logs = client.get("/training/api/logs", params=ti(run_id, replica="master-0"))
    finally:
        cluster.faults.clear()
    assert rule.hits >= 1
    assert view["view"] == "cluster_error"
    assert "refused `get` on `pytorchjobs.kubeflow.org` named " in view["detail"]
    assert "in namespace default (403 Forbidden)" in view["detail"] and "docs/rbac.md" in view["detail"]
    assert logs.status_code == 502 and logs.json()["detail"] == view["detail"]
    assert "403" in view["detail"] and view["job"]["kind"] == "PyTorchJob"


def test_an_unreachable_cluster(client, run_id, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": _unreachable_kubeconfig()}}),
    )
    monkeypatch.setattr(ui_cluster, "HOOKS", ui_cluster.Hooks())
    monkeypatch.setattr(ui_api, "HOOKS", ui_cluster.HOOKS)
    view = job_view(client, run_id)
    assert view["view"] == "cluster_error" and "could not be reached" in view["detail"]


def _unreachable_kubeconfig() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "unreachable-secret-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def test_a_failing_exec_plugin_is_named_not_quoted(client, run_id, cluster, monkeypatch, tmp_path, caplog):
    """An exec plugin's stderr may carry anything (a token, an account): the tab says the credentials could
    not be obtained and where to look; the plugin's output goes to the api-server's log only."""
    plugin = tmp_path / "failing-credential-plugin"
    plugin.write_text(f"#!/bin/sh\necho 'sso login for ops@corp: {PLUGIN_SECRET}' >&2\nexit 1\n")
    plugin.chmod(0o755)
    kubeconfig = _unreachable_kubeconfig()
    kubeconfig["clusters"][0]["cluster"]["server"] = cluster.url
    kubeconfig["users"][0]["user"] = {"exec": {"apiVersion": EXEC_API, "command": str(plugin)}}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": kubeconfig}}),
    )
    monkeypatch.setattr(ui_cluster, "HOOKS", ui_cluster.Hooks())
    monkeypatch.setattr(ui_api, "HOOKS", ui_cluster.HOOKS)
    with caplog.at_level("WARNING"):
        view = job_view(client, run_id)
        logs = client.get("/training/api/logs", params=ti(run_id, replica="master-0"))
    assert view["view"] == "cluster_error"
    assert view["detail"] == (
        "Could not obtain credentials for the cluster of connection 'kubernetes_default': its kubeconfig's "
        "exec or auth-provider plugin failed; see the api-server's log."
    )
    assert logs.status_code == 502 and logs.json()["detail"] == view["detail"]
    assert PLUGIN_SECRET in caplog.text  # what the plugin said, for whoever reads the server's log


PLUGIN_SECRET = "exec-plugin-secret-7d41a9"
EXEC_API = "client.authentication.k8s.io/v1beta1"


def test_authentication_and_authorization(server, run_id):
    url = f"{server}/training/api/job"
    assert httpx.get(url, params=ti(run_id)).status_code == 401
    no_role = {"Authorization": f"Bearer {token(None)}"}
    for path in ("/training/api/job", "/training/api/logs", "/training/api/logs/stream"):
        params = ti(run_id, replica="master-0")
        assert httpx.get(f"{server}{path}", params=params).status_code == 401
        assert httpx.get(f"{server}{path}", params=params, headers=no_role).status_code == 403
    bearer = {"Authorization": f"Bearer {token('viewer')}"}
    assert httpx.get(url, params=ti(run_id), headers=bearer).status_code == 200


def as_user(server: str, user: str) -> httpx.Client:
    """The tab as ``user`` (a viewer whom the auth manager refuses task logs or XComs) runs it."""
    return httpx.Client(base_url=server, cookies={"_token": token("viewer", user)}, timeout=60)


def status_of_stream(client: httpx.Client, params: dict[str, Any]) -> int:
    with client.stream("GET", "/training/api/logs/stream", params=params) as resp:
        return resp.status_code


def test_the_log_routes_demand_task_logs_as_airflows_own(server, run_id):
    """A viewer refused task logs reads the job but not its pods' logs, which Airflow's own log route
    refuses too; one refused XComs (not task logs) reads a live pod's log."""
    params = ti(run_id, replica="master-0")
    airflow_log = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train/logs/1"
    airflow_xcom = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train/xcomEntries"
    with as_user(server, NO_LOGS) as no_logs, as_user(server, NO_XCOM) as no_xcom:
        # The auth manager's decisions, as Airflow's own routes apply them:
        assert no_logs.get(airflow_log).status_code == 403
        assert no_logs.get(airflow_xcom).status_code == 200
        assert no_logs.get("/training/api/job", params=ti(run_id)).status_code == 200
        assert no_logs.get("/training/api/logs", params=params).status_code == 403
        assert status_of_stream(no_logs, params) == 403

        assert no_xcom.get(airflow_xcom).status_code == 403
        live = no_xcom.get("/training/api/logs", params=params)
        assert live.status_code == 200 and live.json()["source"] == "pod"
        assert status_of_stream(no_xcom, params) == 200


def test_log_tail(client, run_id):
    resp = client.get("/training/api/logs", params=ti(run_id, replica="master-0"))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [line["text"] for line in body["lines"]] == ["epoch 1 loss 0.50", "epoch 2 loss 0.40"]
    assert all(line["time"].endswith("Z") for line in body["lines"])
    assert body["source"] == "pod" and body["finished"] is False and body["cursor"]

    last = client.get("/training/api/logs", params=ti(run_id, replica="master-0", tail=1)).json()
    assert [line["text"] for line in last["lines"]] == ["epoch 2 loss 0.40"]
    assert client.get("/training/api/logs", params=ti(run_id, replica="chief-0")).status_code == 404


def events(resp: httpx.Response, until: int) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """``(event, id, data)`` of a server-sent event stream, ``until`` line events at most (and ``end``)."""
    return sse_events(kept(resp.iter_lines()), until)


def kept(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        SEEN.append(line)
        yield line


def write_line(cluster: LocalKube, pod: str, text: str) -> None:
    cluster.call(cluster.logs.write, "default", pod, "pytorch", text)


def test_follow_and_resume_without_repeats(client, run_id, cluster):
    pod = next(p["name"] for p in job_view(client, run_id)["pods"] if p["replica"] == "master-0")
    params = ti(run_id, replica="master-0")
    with client.stream("GET", "/training/api/logs/stream", params=params) as first:
        assert first.headers["content-type"].startswith("text/event-stream")
        got = events(first, until=3)
        backlog = [next(got), next(got)]
        with client.stream("GET", "/training/api/logs/stream", params=params) as second:
            assert [d["text"] for _, _, d in events(second, until=2)] == [d["text"] for _, _, d in backlog]
            assert ui_logs.following() == 1  # two tabs, one follow of the pod
        write_line(cluster, pod, "epoch 3 loss 0.30")
        live = next(got)
    texts = [d["text"] for _, _, d in [*backlog, live]]
    assert texts == ["epoch 1 loss 0.50", "epoch 2 loss 0.40", "epoch 3 loss 0.30"]

    # Reconnect after the first line, as EventSource does with its last id: the rest, none twice.
    resume = {"Last-Event-ID": str(backlog[0][1])}
    with client.stream("GET", "/training/api/logs/stream", params=params, headers=resume) as again:
        got = events(again, until=10)
        assert [next(got)[2]["text"], next(got)[2]["text"]] == ["epoch 2 loss 0.40", "epoch 3 loss 0.30"]
        write_line(cluster, pod, "epoch 4 loss 0.20")
        assert next(got)[2]["text"] == "epoch 4 loss 0.20"
        open_gate(GATE)  # the master exits: the stream ends after its last line
        rest = list(got)
    assert [e for e, _, _ in rest] == ["end"] and "succeeded" in rest[0][2]["reason"]

    # A cursor from /logs works the same (query parameter).
    cursor = client.get("/training/api/logs", params=ti(run_id, replica="master-0", tail=1)).json()["cursor"]
    with client.stream("GET", "/training/api/logs/stream", params={**params, "cursor": cursor}) as tail:
        assert [e for e, _, _ in events(tail, until=10)] == ["end"]


def test_one_snapshot_per_period_for_every_viewer(client, run_id, cluster, monkeypatch):
    monkeypatch.setattr(ui_cluster.SNAPSHOTS, "ttl", 60.0)
    job_view(client, run_id)
    before = len(cluster.requests)
    for _ in range(10):
        job_view(client, run_id)
    assert len(cluster.requests) == before  # ten viewers' refreshes within the period: no request


def test_gone_pods_show_the_lines_the_trigger_saved(client, run_id, cluster):
    view = job_view(client, run_id)
    name = view["job"]["name"]
    save_position(run_id, {"old-pod": {"replica": "master-0", "lines": ["saved 1", "saved 2"]}})
    cluster.call(_delete_pods, cluster, name)
    wait_for(lambda: not job_view(client, run_id)["pods"])

    sources = job_view(client, run_id)["log_sources"]
    assert sources == [{"replica": "master-0", "pod": "old-pod", "live": False}]
    body = client.get("/training/api/logs", params=ti(run_id, replica="master-0")).json()
    assert body == {
        "lines": [{"time": None, "text": "saved 1"}, {"time": None, "text": "saved 2"}],
        "cursor": None,
        "source": "saved",
        "finished": True,
    }
    with client.stream("GET", "/training/api/logs/stream", params=ti(run_id, replica="master-0")) as resp:
        assert [e for e, _, _ in events(resp, until=10)] == ["end"]


def test_the_saved_lines_demand_task_logs_and_xcom_reads(server, run_id):
    """The saved lines are log lines stored as an XCom: a viewer refused either does not get them."""
    params = ti(run_id, replica="master-0")
    for user in (NO_XCOM, NO_LOGS):
        with as_user(server, user) as refused:
            resp = refused.get("/training/api/logs", params=params)
            assert resp.status_code == 403, (user, resp.text)
            assert "saved 1" not in resp.text
    with as_user(server, "viewer") as viewer:
        assert viewer.get("/training/api/logs", params=params).json()["source"] == "saved"


def _delete_pods(cluster: LocalKube, job_name: str) -> None:
    from localkube.resources import PODS

    for pod in cluster.store.list(PODS, "default"):
        if pod["metadata"]["name"].startswith(job_name):
            cluster.store.delete(PODS, "default", pod["metadata"]["name"])


def save_position(run_id: str, tails: dict[str, Any]) -> None:
    """What the trigger saves with its log position (triggers/log_position.py), written as the triggerer
    writes XComs."""
    from airflow.models.xcom import XComModel

    from airflow_provider_training.triggers.log_position import XCOM_KEY

    value = {"cursors": {}, "final": True, "saved_at": 0, "tails": tails}
    XComModel.set(key=XCOM_KEY, value=value, dag_id=DAG_ID, task_id="train", run_id=run_id)


def test_a_deleted_job(client, run_id, cluster):
    view = job_view(client, run_id)
    cluster.call(_delete_job, cluster, view["job"]["name"])
    gone = wait_for(lambda: (v := job_view(client, run_id))["view"] == "deleted" and v)
    assert "is gone from the cluster" in gone["detail"] and gone["job"]["name"] == view["job"]["name"]


def _delete_job(cluster: LocalKube, name: str) -> None:
    rt = cluster.store.resource_type("kubeflow.org", "v1", "pytorchjobs")
    cluster.store.delete(rt, "default", name)


def test_the_ui_lists_the_tab(client):
    """What the UI reads to add the tab: the react app on the task instance page, and the mounted app."""
    plugin = next(p for p in client.get("/api/v2/plugins").json()["plugins"] if p["name"] == "training")
    (app,) = plugin["react_apps"]
    assert {k: app[k] for k in ("name", "bundle_url", "destination", "url_route")} == {
        "name": "Training",
        "bundle_url": "/training/static/main.umd.cjs",
        "destination": "task_instance",
        "url_route": "training",
    }
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/training"]


def test_the_bundle(client, tmp_path, monkeypatch):
    monkeypatch.setattr(ui_api, "BUNDLE", tmp_path / "main.umd.cjs")
    assert client.get("/training/static/main.umd.cjs").status_code == 404
    (tmp_path / "main.umd.cjs").write_text("globalThis.AirflowPlugin = () => null;")
    resp = client.get("/training/static/main.umd.cjs")
    assert resp.status_code == 200 and "javascript" in resp.headers["content-type"]


def test_no_secret_in_any_response(cluster):
    """As tests/test_no_secrets.py: the secrets were there to leak (the connection's token, the job's env in
    the cluster: test_a_running_job checks it, an unreachable connection's token), and the capture saw the
    responses."""
    assert len(SEEN) > 20 and any('"view": "job"' in body or '"view":"job"' in body for body in SEEN)
    for body in SEEN:
        assert cluster.token not in body
        assert "unreachable-secret-token" not in body
        assert (
            PLUGIN_SECRET not in body
        )  # an exec plugin's stderr (test_a_failing_exec_plugin_is_named_not_quoted)
        assert "tab-env-secret-5b7f0c" not in body  # the job's env (dag_files/training_tab.py)

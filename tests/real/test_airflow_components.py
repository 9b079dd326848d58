"""One DAG with real Airflow components (api-server, scheduler with LocalExecutor, dag-processor, triggerer:
the harness of tests/e2e) on a real kube-apiserver, as the ServiceAccount bound to exactly the Role of
docs/rbac.md. The replicas are local processes (localkube agent, process runtime) that wait for a release
file, so the test sees each task deferred with its job running before the job may end, however slow the
machine. Every replica line the trigger logs came through the API server's pods/log proxy from the agent.
"""

from __future__ import annotations

import json
import signal
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from airflow_provider_training.logs import REPEAT_MARK
from tests.e2e.conftest import Airflow, deploy_for
from tests.e2e.test_airflow_components import trigger_events
from tests.e2e.test_triggerer_restart import replica_lines, restart
from tests.real.conftest import launch
from tests.real.rbac import bind_documented, documented_rbac

pytestmark = pytest.mark.timeout(900)  # the first test also starts a cluster and four Airflow components

DAG_FILES = Path(__file__).parent / "dag_files"
PROCESS_AGENT = ("--runtime", "process", "--controllers", "kubeflow")
REPLICAS = ("master-0", "worker-0")
SETTLE = 300.0  # a task to be scheduled, start, create its job and defer, on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    with launch(tmp_path_factory, "airflow-process", agent_args=PROCESS_AGENT) as real:
        yield real


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("release")


@pytest.fixture(scope="module")
def namespace() -> str:
    return str(documented_rbac()[0]["metadata"]["namespace"])


@pytest.fixture(scope="module")
def airflow(
    cluster: RealCluster, release_dir: Path, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    """The deployment, its ``kubernetes_default`` the documented ServiceAccount in the Role's namespace."""
    connection = connection_json(bind_documented(cluster), namespace)
    env = {"REAL_E2E_RELEASE_DIR": str(release_dir)}
    with deploy_for(connection, tmp_path_factory, DAG_FILES, env=env) as deployment:
        yield deployment


def state(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> str | None:
    """The task's state; ``None`` while the busy api-server does not answer within its timeout."""
    try:
        return str(airflow.task_instance(dag_id, run_id, task_id)["state"])
    except (urllib.error.URLError, TimeoutError):
        return None


def records(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> list[list[dict[str, Any]]]:
    """The JSON records of each trigger log file of the task, oldest triggerer first."""
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
        for path in airflow.trigger_log_files(dag_id, run_id, task_id)
    ]


def wait_running(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> None:
    """Wait until the task is deferred and its trigger has logged every replica's first line (the replicas
    then wait for their release file)."""

    def deferred() -> bool:
        now = state(airflow, dag_id, run_id, task_id)
        assert now not in ("failed", "success", "upstream_failed"), now
        return now == "deferred"

    def started() -> bool:
        events = trigger_events(airflow.trigger_log(dag_id, run_id, task_id))
        return all(any(e.startswith(f"[{r}] ") and " started: " in e for e in events) for r in REPLICAS)

    # The gate for the release: the scheduler has taken in the worker's exit after defer(). A trigger event
    # that re-queues the task before it did makes Airflow 3.3's scheduler fail the task ("finished with state
    # success, but the task instance's state attribute is queued"), which a busy machine reaches.
    deferral_exit = (
        f"Received executor event with state success for task instance TaskInstanceKey(dag_id='{dag_id}', "
        f"task_id='{task_id}', run_id='{run_id}'"
    )

    airflow.wait(f"{dag_id}.{task_id} of {run_id} to defer", deferred, SETTLE)
    airflow.wait(f"the trigger of {dag_id}.{task_id} to show its replicas", started, SETTLE)
    airflow.wait(
        f"the scheduler to see {dag_id}.{task_id}'s worker exit after defer()",
        lambda: deferral_exit in airflow.output("scheduler"),
        SETTLE,
    )


def wait_final(airflow: Airflow, dag_id: str, run_id: str, task_id: str) -> str:
    (final,) = airflow.wait(
        f"{dag_id}.{task_id} of {run_id} to finish",
        lambda: {"success", "failed"} & {state(airflow, dag_id, run_id, task_id)},
        SETTLE,
    )
    return str(final)


def pod_log(cluster: RealCluster, namespace: str, pod: str) -> list[str]:
    """The pod's log as the API server's pods/log proxy serves it from the agent's kubelet endpoint."""
    return cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log").decode().splitlines()


def test_a_deferred_task_succeeds_and_a_failed_job_fails_its_task(
    airflow: Airflow, cluster: RealCluster, release_dir: Path, namespace: str
) -> None:
    airflow.trigger("real_train", "run1")
    for task_id in ("train", "train_fails"):
        wait_running(airflow, "real_train", "run1", task_id)

    (release_dir / "run1-train").touch()
    (release_dir / "run1-train-fails").touch()

    assert wait_final(airflow, "real_train", "run1", "train") == "success", airflow.diagnostics()
    assert wait_final(airflow, "real_train", "run1", "train_fails") == "failed", airflow.diagnostics()
    events = trigger_events(airflow.trigger_log("real_train", "run1", "train"))
    for rank, replica in enumerate(REPLICAS):
        pod = f"run1-train-{replica}"
        # What the process saw: the operator's addresses mapped to this machine by the process runtime.
        started = f"[{replica}] {pod} started: RANK={rank} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="
        assert any(e.startswith(started) for e in events), events
        assert f"[{replica}] model saved" in events
        logged = [e.removeprefix(f"[{replica}] ") for e in events if e.startswith(f"[{replica}] ")]
        assert logged == pod_log(cluster, namespace, pod)
    assert any(e.startswith(f"PyTorchJob {namespace}/run1-train is Succeeded") for e in events), events
    xcom = "/dags/real_train/dagRuns/run1/taskInstances/train/xcomEntries/return_value"
    result = airflow.request("GET", xcom)["value"]
    assert (result["state"], result["namespace"]) == ("Succeeded", namespace)
    job = cluster.get(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/run1-train")
    assert job["metadata"]["uid"] == result["uid"]
    master = cluster.get(f"/api/v1/namespaces/{namespace}/pods/run1-train-master-0")
    stored = {e["name"]: e.get("value") for e in master["spec"]["containers"][0]["env"]}
    assert stored["MASTER_ADDR"] == "run1-train-master-0"  # the stored env is the operator's

    task_dir = airflow.task_dir("real_train", "run1", "train_fails")
    failed = (task_dir / "attempt=1.log").read_text()  # the worker's log of the resumed task
    assert "TrainingJobError" in failed, failed
    assert "master-0 (pod run1-train-fails-master-0, container pytorch): exit code 3" in failed, failed
    assert "| RuntimeError: shard 7 is corrupt" in failed, failed  # its last log lines, read via the proxy
    trigger = trigger_events(airflow.trigger_log("real_train", "run1", "train_fails"))
    assert "[master-0] RuntimeError: shard 7 is corrupt" in trigger, trigger
    assert "forbidden" not in "\n".join([failed, *events, *trigger]).lower()  # the Role sufficed, no retries


@pytest.mark.xfail(
    reason="failed in CI on c572170 (a worker's 'model saved' missing after the restart): under investigation"
)
def test_a_triggerer_restart_mid_wait_repeats_and_loses_no_line(airflow: Airflow, release_dir: Path) -> None:
    airflow.trigger("real_restart", "restart1")
    wait_running(airflow, "real_restart", "restart1", "train")

    restart(airflow, "triggerer", signal.SIGTERM)
    airflow.wait(
        "the second triggerer to resume the trigger",
        lambda: (
            len(files := records(airflow, "real_restart", "restart1", "train")) >= 2
            and any("Resuming the replica logs" in str(r["event"]) for r in files[-1])
        ),
        SETTLE,
    )
    (release_dir / "restart1-train").touch()

    assert wait_final(airflow, "real_restart", "restart1", "train") == "success", airflow.diagnostics()
    airflow.wait(
        "the last trigger's event in its file",
        lambda: any(
            r["event"] == "Trigger fired event"
            for r in records(airflow, "real_restart", "restart1", "train")[-1]
        ),
        SETTLE,
    )
    files = records(airflow, "real_restart", "restart1", "train")
    assert "Resuming the replica logs where the previous trigger stopped" in [r["event"] for r in files[-1]]
    for replica in REPLICAS:
        lines = replica_lines(files, replica)
        texts = [str(r["event"]).removeprefix(f"[{replica}] ") for _, r in lines]
        assert len(texts) == 2 and texts[0].startswith(f"restart1-train-{replica} started: "), texts
        assert texts[1] == "model saved", texts
        assert [index for index, _ in lines] == [0, len(files) - 1]  # before the restart, then after it
        assert not any(REPEAT_MARK in text for text in texts)

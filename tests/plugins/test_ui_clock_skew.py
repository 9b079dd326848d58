"""Issue 27, point 7: the Training tab's live log on an api-server 120 s ahead of the cluster's clock.

localkube's ``clock_offset`` puts the API server's clock, and its kubelet's (the log lines' timestamps and
``sinceTime``), 120 s behind this machine's. The tab's shared follow of a pod starts on the server's clock, so
the lines written after a tab opened its stream reach it; started on this machine's clock, its ``sinceTime``
lay 2 minutes in the cluster's future and it got none of them. The job view gives the server's now, which
the tab measures the ages of pods and events from.

The fixtures are tests/plugins/test_ui_api.py's (the same DAG, api-server app and client), on a skewed
localkube: the job's master writes its lines and holds at a gate until the test opens it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from localkube.cluster import LocalKube
from localkube.runtime import open_gate

from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.plugins import ui_logs
from tests.dags.conftest import airflow_db
from tests.operators.harness import serve, wait_for
from tests.plugins.test_ui_api import GATE, client, events, job_view, run_id, server, ti, write_line

__all__ = ["airflow_db", "client", "run_id", "server"]

pytestmark = pytest.mark.timeout(300)

SKEW = -120.0  # the server's clock, behind this machine's


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    with serve(tmp_path_factory, clock_offset=SKEW) as kube:
        yield kube


def test_the_job_view_gives_the_servers_now_for_the_ages(client, run_id):
    """The tab counts the ages of pods and events from ``server_time``, not from the browser's clock."""
    view = wait_for(lambda: (v := job_view(client, run_id))["pods"] and v)

    now = datetime.fromisoformat(view["server_time"])
    created = max(datetime.fromisoformat(pod["created"]) for pod in view["pods"])
    assert timedelta(0) <= now - created < timedelta(seconds=-SKEW / 2)  # this machine's: 2 minutes more


def test_lines_written_after_the_stream_opened_arrive(client, run_id, cluster):
    view = wait_for(lambda: (v := job_view(client, run_id))["pods"] and v)
    pod = next(p["name"] for p in view["pods"] if p["replica"] == "master-0")
    wait_for(lambda: "epoch 2" in cluster.logs.text("default", pod, "pytorch"))  # the master is at its gate

    with client.stream("GET", "/training/api/logs/stream", params=ti(run_id, replica="master-0")) as resp:
        got = events(resp, until=10)
        backlog = [next(got)[2]["text"], next(got)[2]["text"]]  # the tab's own catch-up read
        write_line(cluster, pod, "epoch 3 loss 0.30")  # only the shared follow can bring this one
        open_gate(GATE)  # the master exits: the stream ends after its last line
        rest = list(got)

    assert backlog == ["epoch 1 loss 0.50", "epoch 2 loss 0.40"]
    assert [(e, d.get("text")) for e, _, d in rest[:-1]] == [("line", "epoch 3 loss 0.30")], rest
    assert rest[-1][0] == "end" and "succeeded" in rest[-1][2]["reason"], rest


def test_a_follow_whose_clock_has_not_seen_the_server_sets_it_first(cluster, tmp_path):
    """A configuration loaded again (here: a kubeconfig of its own) has a clock that no answer has set yet:
    the follow reads the pod before it starts, and starts on the server's clock."""
    started = asyncio.run(follow_start(cluster.write_kubeconfig(tmp_path / "kubeconfig")))

    assert (
        started / 1e9 < time.time() + SKEW / 2
    )  # about 2 minutes back: the server's now, not this machine's


async def follow_start(kubeconfig: Path) -> int:
    """Where a follow of a pod (that need not exist) starts, in ns, on a hook of its own on ``kubeconfig``."""
    hook = AsyncTrainingJobHook(config_file=str(kubeconfig))
    try:
        assert not (await hook.server_clock()).known
        follow = ui_logs.PodFollow(hook, "default", "no-such-pod", "no-uid", "pytorch")
        listener = follow.join()
        while follow.cursor.key is None:
            await asyncio.sleep(0.01)
        follow.leave(listener)
        return follow.cursor.key
    finally:
        await hook.close()

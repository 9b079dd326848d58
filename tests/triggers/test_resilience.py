"""The wait rides out what real API servers do: throttling, 5xx, dropped connections, expired watches and
a restart of the server; it still ends with the right event and every log line exactly once."""

from __future__ import annotations

import asyncio

import pytest

from tests.operators.harness import (
    KIND_BY_NAME,
    NAMESPACE,
    in_thread,
    manifest,
    pods_running,
    resource,
    wait_for,
)
from tests.triggers.test_trigger import first, trigger_for

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
PYTORCH = KIND_BY_NAME["PyTorchJob"]
LOGS = ["epoch 1 loss 0.9", "epoch 2 loss 0.5", "model saved"]


@pytest.fixture
def faults(cluster):
    yield cluster.faults
    cluster.faults.clear()


def create(cluster, name, duration):
    script = {"default": {"duration": duration, "logs": LOGS}}
    cluster.store.create(resource(cluster, PYTORCH), NAMESPACE, manifest(PYTORCH, script, name=name))


def assert_logged_once(out, pod_label):
    for line in LOGS:
        assert out.count(f"[{pod_label}] {line}") == 1, line


async def test_throttling_errors_drops_and_expired_watches(cluster, faults, capsys):
    create(cluster, "flaky", 1.0)
    rules = [
        faults.throttle(count=2, resource="pytorchjobs"),
        faults.fail(503, count=2, resource="pods"),
        faults.drop(count=1, resource="pods"),
        faults.expire_watch(count=1, resource="pytorchjobs"),
        faults.expire_watch(count=1, resource="pods"),
    ]

    event = await first(trigger_for("flaky", log_replicas="all"))

    assert event["status"] == "success"
    assert [rule.hits for rule in rules] == [rule.count for rule in rules]  # every fault was met
    out = capsys.readouterr().out
    assert_logged_once(out, "master-0")
    assert_logged_once(out, "worker-0")


async def test_api_server_restart_while_waiting(cluster, faults, capsys):
    create(cluster, "restarted", 1.5)

    def restart_when_running():
        wait_for(lambda: pods_running(cluster, "restarted"))
        faults.restart()

    restarter, outcome = in_thread(restart_when_running)
    event = await first(trigger_for("restarted", log_replicas="all"))
    await asyncio.to_thread(restarter.join)

    assert "error" not in outcome
    assert event["status"] == "success"
    assert_logged_once(capsys.readouterr().out, "master-0")

"""T9k GenericJob (tensorstack-t9k.md §3): success and failure rules, restart limits, variable substitution,
labels and Services, through the real `kubernetes` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.controllers.tensorstack_generic import GenericJobController
from test_controller_builtin import running
from test_controller_support import SCRIPT, KubeClient
from test_controller_tensorstack import conditions, create, pods, until_phase


def generic(name: str, script: dict, *, restart: dict | None = None, **spec: Any) -> dict:
    """A GenericJob with one `ps` and two `worker` replicas running `python train.py`."""

    def replica(type_: str, replicas: int) -> dict:
        container = {
            "name": "main",
            "image": "example/train:1",
            "command": ["python", "train.py", "--type=$(type)", "--rank=$(rank)"],
            "args": ["--workers=$(replicas[worker])", "--ps=$(service.ps[0].host):$(service.port[grpc])"],
            "env": [{"name": "PS_HOST", "value": "$(service.ps[0].host)"}],
        }
        entry: dict[str, Any] = {
            "type": type_,
            "replicas": replicas,
            "template": {"spec": {"containers": [container]}},
        }
        if restart is not None:
            entry["restartPolicy"] = restart
        return entry

    return {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "GenericJob",
        "metadata": {"name": name, "annotations": {SCRIPT: json.dumps(script)}},
        "spec": {
            "replicaSpecs": [replica("ps", 1), replica("worker", 2)],
            "service": {"ports": [{"name": "grpc", "port": 2222}]},
            **spec,
        },
    }


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, GenericJobController()) as kube:
        yield kube


def test_success_rule_decides_while_the_ps_still_runs(kube: KubeClient) -> None:
    body = generic("gj-ok", {"ps": {"duration": None}}, successRules=[{"worker": [0, 1]}])
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    assert conditions(final)["Completed"] == ("True", "Succeeded")
    assert conditions(final)["Failed"] == ("False", "Succeeded")
    assert "backoffCount" not in final["status"]
    found = pods(kube, "gj-ok")
    assert sorted(found) == ["gj-ok-ps-0", "gj-ok-worker-0", "gj-ok-worker-1"]
    worker = found["gj-ok-worker-1"]
    assert worker.metadata.labels["genericjob"] == "gj-ok"  # type: ignore[attr-defined]
    assert worker.metadata.labels["genericjob-replica"] == "gj-ok-worker-1"  # type: ignore[attr-defined]
    assert worker.metadata.labels["tensorstack.dev/component"] == "genericjob"  # type: ignore[attr-defined]
    main = worker.spec.containers[0]  # type: ignore[attr-defined]
    assert main.command == ["python", "train.py", "--type=worker", "--rank=1"]
    assert main.args == ["--workers=2", "--ps=gj-ok-ps-0.default.svc:2222"]
    assert {e.name: e.value for e in main.env} == {"PS_HOST": "gj-ok-ps-0.default.svc"}
    service = kube.core.read_namespaced_service("gj-ok-worker-1", "default")
    assert [(p.name, p.port) for p in service.spec.ports] == [("grpc", 2222)]
    tasks = {t["type"]: t for t in final["status"]["tasks"]}
    assert [r["phase"] for r in tasks["worker"]["replicas"]] == ["Succeeded", "Succeeded"]


def test_failure_rule_fails_the_job_with_the_rule_in_the_message(kube: KubeClient) -> None:
    body = generic(
        "gj-fail",
        {"ps": {"duration": None}, "worker-0": {"exit_code": 127}},
        successRules=[{"worker": [0, 1]}],
        failureRules=[{"worker": ["0"]}],
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    failed = next(c for c in final["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["message"]) == ("True", 'The job is failed with rule: {"worker":["0"]}')
    assert conditions(final)["Completed"] == ("True", "Failed")
    replica_failure = next(c for c in final["status"]["conditions"] if c["type"] == "ReplicaFailure")
    assert replica_failure["message"] == "Pod[gj-fail-worker-0] exited with error code 127"


def test_restart_limit_replaces_a_failed_replica(kube: KubeClient) -> None:
    script = {"ps": {"duration": None}, "worker-1": {"attempts": [{"exit_code": 137}, {"exit_code": 0}]}}
    body = generic(
        "gj-retry", script, restart={"policy": "OnFailure", "limit": 1}, successRules=[{"worker": [0, 1]}]
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Succeeded"
    tasks = {t["type"]: t for t in final["status"]["tasks"]}
    assert tasks["worker"]["restartCount"] == 1


def test_without_restarts_left_no_success_rule_can_be_met(kube: KubeClient) -> None:
    body = generic(
        "gj-never", {"ps": {"duration": None}, "worker-1": {"exit_code": 137}}, restart={"policy": "Never"}
    )
    create(kube, body)
    final = until_phase(kube, body, "Succeeded", "Failed")
    assert final["status"]["phase"] == "Failed"
    failed = next(c for c in final["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "The job is failed: no success rule can be met"

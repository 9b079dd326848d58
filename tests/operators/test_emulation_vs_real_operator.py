"""localkube's Kubeflow emulation against what the real training operator (v1.9.2) wrote in the same
scenarios: the records in tests/fixtures/real-operator/ (made by tests/real/test_real_operator.py with
REALTO_RECORD=1), one per kind and scenario of tests/real/real_operator.py.

Compared: the conditions (type, status, reason, message) in the order the job passed through them (only the
final ones where the scenario says the controller's timing decides the steps between: a deadline), the
replica types in the final status (and MPIJob's worker counters, which TO-1.9 stops counting once the
launcher finished), and the pods and Services once the controller settled (names, labels, restartPolicy,
init containers, env, ports; not past a backoff limit or deadline, where TO-1.9 may make pods again).
Not compared: the replica counters of other kinds at the end, which depend on when the job was deleted, and
the Service ports' ``protocol`` and ``targetPort``, which kube-apiserver's defaulting adds (not the operator).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from localkube.gates import open_gate

from tests.real.real_operator import RECORDINGS, SCENARIOS, Api, cases, run_recorded

pytestmark = pytest.mark.timeout(120)


def condition_steps(statuses: list[dict[str, Any]]) -> list[list[tuple[str, ...]]]:
    """The conditions of each status, consecutive repeats once."""
    steps: list[list[tuple[str, ...]]] = []
    for status in statuses:
        step = [(c["type"], c["status"], c["reason"], c["message"]) for c in status.get("conditions", [])]
        if not steps or steps[-1] != step:
            steps.append(step)
    return steps


def compared_statuses(scenario: str, statuses: list[dict[str, Any]]) -> list[list[tuple[str, ...]]]:
    steps = condition_steps(statuses)
    return steps if SCENARIOS[scenario].compare == "steps" else steps[-1:]


def compared_children(children: dict[str, Any]) -> dict[str, Any]:
    services = {
        name: {**service, "ports": [{k: p[k] for k in ("name", "port")} for p in service["ports"]]}
        for name, service in children["services"].items()
    }
    return {"pods": children["pods"], "services": services}


def final_replicas(kind: str, status: dict[str, Any]) -> Any:
    replicas = status.get("replicaStatuses") or {}
    if kind == "MPIJob":
        return {rtype: {k: v for k, v in s.items() if k != "selector"} for rtype, s in replicas.items()}
    return sorted(replicas)


@pytest.mark.parametrize(("case", "scenario"), cases(), ids=lambda v: str(v))
def test_the_emulation_writes_what_the_real_operator_wrote(cluster, case, scenario):
    real = json.loads((RECORDINGS / f"{case.kind.lower()}-{scenario}.json").read_text())

    namespace = real["namespace"]  # the messages of some kinds name it
    cluster.create_namespaces(namespace)
    emulated = run_recorded(Api(cluster.url, cluster.token), case, scenario, open_gate, namespace=namespace)

    statuses = emulated.seen.statuses
    assert compared_statuses(scenario, statuses) == compared_statuses(scenario, real["statuses"])
    assert final_replicas(case.kind, statuses[-1]) == final_replicas(case.kind, real["statuses"][-1])
    if SCENARIOS[scenario].children_compared:
        assert compared_children(emulated.children) == compared_children(real["children"])

"""Hold faults: a request waits at a named gate, before it is served, until the test (or an admin call over
HTTP) opens it; the tests that race two clients use them to order requests deterministically."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from kubernetes import client
from localkube.cluster import LocalKube
from localkube.faults import FaultRule


def test_a_held_request_is_served_after_the_gate_opens_over_http(kube: LocalKube, core: client.CoreV1Api):
    gate = kube.faults.hold("create", method="POST", resource="configmaps")
    outcome: dict = {}
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="held"))
    thread = threading.Thread(
        target=lambda: outcome.update(made=core.create_namespaced_config_map("default", body))
    )
    thread.start()
    assert gate.wait_reached()
    assert gate.arrived == ["POST /api/v1/namespaces/default/configmaps"]
    assert core.list_namespaced_config_map("default").items == []  # not served yet; others pass

    request = urllib.request.Request(
        f"{kube.url}/localkube/gates/create", method="POST", headers={"Authorization": f"Bearer {kube.token}"}
    )
    with urllib.request.urlopen(request) as answer:
        assert answer.status == 200
    thread.join(20)

    assert outcome["made"].metadata.name == "held"
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="b")))
    assert gate.arrived == ["POST /api/v1/namespaces/default/configmaps"]  # count=1: only the first


def test_a_hold_rule_must_name_its_gate():
    with pytest.raises(ValueError, match="names its gate"):
        FaultRule("hold")

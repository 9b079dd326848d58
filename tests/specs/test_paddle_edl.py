"""EDL TrainingJob spec model: the upstream example loads (its ``trainer.passes`` moved to ``spec.passes``),
the defaults the controller never applies are filled in, both lineages' keys are accepted exactly."""

from __future__ import annotations

import copy
import logging
from typing import Any

import yaml

from airflow_provider_training.specs import load_job, parse_job
from airflow_provider_training.specs.paddle_edl import TrainingJob
from tests.fixtures import EXAMPLES
from tests.specs.helpers import refused

EXAMPLE = EXAMPLES / "paddle-edl" / "fit_a_line_examplejob.yaml"


def minimal(**spec: Any) -> dict[str, Any]:
    body = {"trainer": {"entrypoint": "python train.py", "min-instance": 2}, **spec}
    return {
        "apiVersion": "paddlepaddle.org/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "fit"},
        "spec": body,
    }


def test_upstream_example_loads_with_passes_moved(caplog):
    original = yaml.safe_load(EXAMPLE.read_text())
    with caplog.at_level(logging.WARNING, logger="airflow_provider_training.specs.paddle_edl"):
        loaded = load_job(EXAMPLE)
    assert "moved to spec.passes = 50" in caplog.text
    expected = copy.deepcopy(original)
    expected["spec"]["passes"] = expected["spec"]["trainer"].pop("passes")
    assert loaded == expected
    assert isinstance(parse_job(EXAMPLE), TrainingJob)


def test_the_controllers_missing_defaults_are_filled_in():
    spec = load_job(minimal())["spec"]
    assert {key: spec[key] for key in ("image", "port", "ports_num", "ports_num_for_sparse", "passes")} == {
        "image": "paddlepaddle/paddlecloud-job",
        "port": 7164,
        "ports_num": 1,
        "ports_num_for_sparse": 1,
        "passes": 1,
    }
    assert spec["trainer"] == {"entrypoint": "python train.py", "min-instance": 2}


def test_spec_passes_wins_over_trainer_passes(caplog):
    job = minimal(passes=3)
    job["spec"]["trainer"]["passes"] = 50
    with caplog.at_level(logging.WARNING):
        spec = load_job(job)["spec"]
    assert spec["passes"] == 3 and "passes" not in spec["trainer"]
    assert "is dropped" in caplog.text


def test_both_lineages_keys_are_accepted_as_written():
    resource = minimal(
        HostNetwork=True,
        VolumeMounts=[{"name": "data", "mountPath": "/data"}],
        volumes=[{"name": "data", "emptyDir": {}}],
        imagePullSecrets=[{"name": "registry"}],
        fault_tolerant=False,
        pserver={"min-instance": 2, "max-instance": 2, "resources": {"requests": {"cpu": "500m"}}},
        master={"etcd-endpoint": "http://etcd:2379", "resources": {"limits": {"cpu": "1"}}},
    )
    assert load_job(copy.deepcopy(resource))["spec"]["HostNetwork"] is True
    crd = minimal(host_network=True, NodeSelector={"pool": "gpu"})
    crd["spec"]["trainer"].update({"etcd-endpoint": "http://etcd:2379", "max-instance": 4, "replicaSpec": {}})
    loaded = load_job(copy.deepcopy(crd))["spec"]
    assert (loaded["host_network"], loaded["NodeSelector"], loaded["trainer"]["max-instance"]) == (
        True,
        {"pool": "gpu"},
        4,
    )


def test_other_spellings_are_refused_with_the_allowed_keys():
    error = refused(
        minimal(hostNetwork=True), "spec.hostNetwork", "unknown field", "HostNetwork", "host_network"
    )
    assert "VolumeMounts" in str(error)
    refused(minimal(host_network=True, HostNetwork=False), "spec.host_network", "must equal spec.HostNetwork")


def test_bad_specs_name_the_field():
    no_min = minimal()
    del no_min["spec"]["trainer"]["min-instance"]
    refused(no_min, "spec.trainer.min-instance", "required")
    refused(
        minimal(trainer={"entrypoint": "x", "min-instance": 0}),
        "spec.trainer.min-instance",
        "greater than or equal to 1",
    )
    refused(minimal(trainer={"min-instance": 1}), "spec.trainer.entrypoint", "required")
    refused(minimal(imagePullSecrets={"name": "registry"}), "spec.imagePullSecrets", "valid list")
    refused(minimal(port="7164"), "spec.port", "valid integer")
    no_trainer = minimal()
    del no_trainer["spec"]["trainer"]
    refused(no_trainer, "spec.trainer", "required")


def test_name_leaves_room_for_the_children():
    assert parse_job(minimal()).name_limit() == 63 - len("-trainer")
    long_name = minimal()
    long_name["metadata"]["name"] = "t" * 56
    refused(long_name, "metadata.name", "at most 55 characters", "-trainer")
    refused({**minimal(), "metadata": {"name": "Fit"}}, "metadata.name", "DNS-1035")

"""Link templates by kind and family (issue 9): the most specific entry wins; else no link."""

from __future__ import annotations

import json

import pytest

from airflow_provider_training.links import choose_template, format_link, url_template

BY_FAMILY = {
    "kubeflow": "https://kubeflow.example/_/training/#/{namespace}/{plural}/{name}",
    "tensorstack": "https://t9k.example/console/{namespace}/{plural}/{name}",
    "PyTorchJob": "https://pytorch.example/{namespace}/{name}",
}


@pytest.mark.parametrize(
    ("kind", "family", "expected"),
    [
        ("PyTorchJob", "kubeflow", BY_FAMILY["PyTorchJob"]),  # the kind wins over its family
        ("TFJob", "kubeflow", BY_FAMILY["kubeflow"]),
        ("PyTorchTrainingJob", "tensorstack", BY_FAMILY["tensorstack"]),  # not the Kubeflow dashboard
        ("TrainingJob", "paddle-edl", ""),  # nothing covers it: no link rather than another family's page
    ],
)
def test_the_most_specific_template_wins(kind, family, expected):
    assert choose_template(BY_FAMILY, kind, family) == expected
    assert choose_template(json.dumps(BY_FAMILY), kind, family) == expected  # as config text


def test_default_entry_and_single_template():
    assert choose_template(
        {**BY_FAMILY, "default": "https://k8s.example/{name}"}, "MXJob", "mxnet-legacy"
    ) == ("https://k8s.example/{name}")
    single = "https://dash.example/{namespace}/{plural}/{name}"
    assert choose_template(single, "MXJob", "mxnet-legacy") == single  # one template: every kind, as before
    assert choose_template("{bad json", "MXJob", "x") == "{bad json"  # not JSON: a template
    assert choose_template(None, "MXJob", "x") == ""


def test_connection_first_then_config(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW__TRAINING__JOB_URL_TEMPLATE", json.dumps({"default": "https://cfg.example/{name}"})
    )
    extra = {"training_job_url_template": {"tensorstack": "https://t9k.example/{name}"}}
    monkeypatch.setenv("AIRFLOW_CONN_LINKED", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    assert url_template("linked", kind="GenericJob", family="tensorstack") == "https://t9k.example/{name}"
    assert url_template("linked", kind="TFJob", family="kubeflow") == "https://cfg.example/{name}"
    value = {"template": url_template("linked", kind="TFJob", family="kubeflow"), "name": "x"}
    assert format_link(value) == "https://cfg.example/x"

"""Airflow discovers the provider through its entry point, with its hooks, triggers, links and config."""

from __future__ import annotations

import os
import subprocess
import sys


def test_airflow_providers_list_shows_the_provider():
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    ).stdout
    assert '"airflow-provider-training"' in out


def test_providers_manager_reads_every_section():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    info = manager.providers["airflow-provider-training"].data
    assert "airflow_provider_training.links.TrainingJobLink" in manager.extra_links_class_names
    assert any(t.package_name == "airflow-provider-training" for t in manager.trigger)
    assert {s["integration-name"] for s in info["operators"] + info["sensors"]} == {"Distributed Training"}
    assert set(info["config"]["training"]["options"]) == {
        "job_url_template",
        "startup_timeout",
        "status_grace_period",
    }
    assert "connection-types" not in info  # the kubernetes type is cncf.kubernetes'
    for section in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                __import__(module)


def test_every_public_operator_and_sensor_is_registered():
    from airflow_provider_training import operators, sensors
    from airflow_provider_training.provider_info import PROVIDER_INFO

    for package, section in ((operators, "operators"), (sensors, "sensors")):
        listed = {m for entry in PROVIDER_INFO[section] for m in entry["python-modules"]}
        modules = {getattr(package, name).__module__ for name in package.__all__}
        assert modules <= listed, f"{section} not in provider_info: {sorted(modules - listed)}"

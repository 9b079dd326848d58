"""The CRDs written from the reference documents (tests/fixtures/crds-written) against the upstream examples
on the real API server: each example is admitted (a server-side dry run), and what the server prunes is
exactly what the reference says the operator's Go types drop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_training.kinds import get_kind
from tests.fixtures import examples
from tests.specs.helpers import missing

pytestmark = pytest.mark.timeout(120)
FAMILIES = ("mxnet-legacy", "paddle-edl", "t9k", "mpi-operator")
# What the Go types drop (legacy-paddle-edl.md §3: `passes` under `trainer:`; legacy-mxnet.md B2: the
# v1alpha1 MXJobSpec has no `jobMode`); nothing else may be pruned.
DROPPED = {
    "fit_a_line_examplejob.yaml": [".spec.trainer.passes"],
    "kubeflow_v1alpha1_mx_job_dist.yaml": [".spec.jobMode"],
}


@pytest.mark.parametrize(
    "example", [p for family in FAMILIES for p in examples(family)], ids=lambda p: p.name
)
def test_an_upstream_example_is_admitted_and_pruned_only_where_the_go_type_drops(
    legacy_cluster, example: Path
):
    manifest = yaml.safe_load(example.read_text())
    manifest["metadata"]["namespace"] = "default"
    plural = get_kind(manifest["kind"], manifest["apiVersion"]).resource.plural
    path = f"/apis/{manifest['apiVersion']}/namespaces/default/{plural}?dryRun=All"

    stored = json.loads(legacy_cluster.request("POST", path, manifest))

    assert missing(manifest["spec"], stored["spec"], ".spec") == DROPPED.get(example.name, [])

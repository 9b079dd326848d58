"""CRD schema validation and pruning against the real upstream CRDs (tests/fixtures/crds)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from localkube.schema import CrdInfo, SchemaRegistry, SchemaViolation

# the provider's vendored upstream files: one copy serves both test suites of this repository
REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
CRD_DIR = REFERENCE / "crds"
EXAMPLES = sorted((REFERENCE / "examples" / "kubeflow-v1").glob("*.yaml"))

PYTORCH = ("kubeflow.org", "v1", "pytorchjobs")
MASTER = "spec.pytorchReplicaSpecs.Master"


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry.from_dir(CRD_DIR)


def pytorch_job(**master: Any) -> dict[str, Any]:
    """A PyTorchJob as the upstream examples write one, with overrides for the Master replica spec."""
    container = {"name": "pytorch", "image": "pytorch:2", "command": ["python", "train.py"]}
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "default", "labels": {"team": "a"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {**replica, **master}, "Worker": copy.deepcopy(replica)}},
    }


def invalid(registry: SchemaRegistry, key: tuple[str, str, str], obj: dict[str, Any]) -> dict[str, str]:
    """The errors ``obj`` is refused with, as {field: message}."""
    with pytest.raises(SchemaViolation) as caught:
        registry.validate_and_prune(*key, obj)
    return {e.field: e.message for e in caught.value.errors}


def write_crd(directory: Path, spec_schema: dict[str, Any], **version: Any) -> SchemaRegistry:
    """A one-version CRD ``widgets.example.com/v1`` whose ``spec`` has ``spec_schema``, loaded from disk."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}},
                    **version,
                }
            ],
        },
    }
    (directory / "widgets.yaml").write_text(yaml.safe_dump(crd))
    return SchemaRegistry.from_dir(directory)


def widget(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


WIDGETS = ("example.com", "v1", "widgets")


# ------------------------------------------------------------------------------------------- loading


def test_loads_every_served_version_of_the_reference_crds(registry: SchemaRegistry) -> None:
    infos = {(i.group, i.version, i.plural): i for i in registry.crds()}

    assert infos[PYTORCH] == CrdInfo(
        "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "pytorchjob", True, frozenset({"status", "scale"})
    )
    assert infos["kubeflow.org", "v1", "tfjobs"].subresources == frozenset({"status"})
    # Two files define mpijobs.kubeflow.org: both versions are served.
    assert registry.has("kubeflow.org", "v1", "mpijobs")
    assert registry.has("kubeflow.org", "v2beta1", "mpijobs")
    runtime = infos["trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"]
    assert (runtime.namespaced, runtime.subresources) == (False, frozenset())
    assert not registry.has("kubeflow.org", "v2", "pytorchjobs")
    with pytest.raises(KeyError):
        registry.validate_and_prune("kubeflow.org", "v2", "pytorchjobs", pytorch_job())


def test_skips_other_documents_and_unserved_versions(tmp_path: Path) -> None:
    write_crd(tmp_path, {"type": "object"})
    crd = yaml.safe_load((tmp_path / "widgets.yaml").read_text())
    crd["spec"]["versions"][0]["served"] = False
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    other = copy.deepcopy(crd)
    other["spec"]["names"] = {"kind": "Gadget", "plural": "gadgets"}
    other["spec"]["versions"][0]["served"] = True
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump_all([configmap, crd, None, other]))

    registry = SchemaRegistry.from_dir(tmp_path)

    assert [(i.plural, i.singular) for i in registry.crds()] == [("gadgets", "gadget")]


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        SchemaRegistry.from_dir(tmp_path / "absent")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_upstream_examples_validate(registry: SchemaRegistry, path: Path) -> None:
    for manifest in yaml.safe_load_all(path.read_text()):
        group, version = manifest["apiVersion"].split("/")
        plurals = [
            i.plural
            for i in registry.crds()
            if (i.group, i.version, i.kind) == (group, version, manifest["kind"])
        ]
        assert plurals, f"no CRD for {manifest['kind']} {manifest['apiVersion']}"
        before = copy.deepcopy(manifest)

        result = registry.validate_and_prune(group, version, plurals[0], manifest)

        assert manifest == before
        assert result["metadata"] == manifest["metadata"]
        replica_specs = next(v for k, v in manifest["spec"].items() if k.endswith("ReplicaSpecs"))
        result_specs = next(v for k, v in result["spec"].items() if k.endswith("ReplicaSpecs"))
        assert result_specs.keys() == replica_specs.keys()
        for name, spec in replica_specs.items():
            result_containers = result_specs[name]["template"]["spec"]["containers"]
            assert [c["image"] for c in result_containers] == [
                c["image"] for c in spec["template"]["spec"]["containers"]
            ]


# ---------------------------------------------------------------------------------------- validation


def test_wrong_type_is_refused_naming_the_field(registry: SchemaRegistry) -> None:
    job = pytorch_job(replicas="two")

    with pytest.raises(SchemaViolation) as caught:
        registry.validate_and_prune(*PYTORCH, job)

    violation = caught.value
    assert (violation.kind, violation.name, violation.group) == ("PyTorchJob", "mnist", "kubeflow.org")
    [error] = violation.errors
    assert error.field == f"{MASTER}.replicas"
    assert error.value == "two"
    assert (
        error.message
        == f'Invalid value: "string": {MASTER}.replicas in body must be of type integer: "string"'
    )
    assert str(violation) == f'PyTorchJob.kubeflow.org "mnist" is invalid: {error.field}: {error.message}'
    assert violation.causes() == [
        {"reason": "FieldValueInvalid", "message": error.message, "field": error.field}
    ]


def test_several_errors_are_reported_together(registry: SchemaRegistry) -> None:
    job = pytorch_job(replicas="two", restartPolicy=5, template={"spec": {"containers": None}})
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("name")
    job["spec"]["runPolicy"] = {"backoffLimit": 2**31}

    errors = invalid(registry, PYTORCH, job)

    assert errors == {
        f"{MASTER}.replicas": (
            f'Invalid value: "string": {MASTER}.replicas in body must be of type integer: "string"'
        ),
        f"{MASTER}.restartPolicy": (
            f'Invalid value: "integer": {MASTER}.restartPolicy in body must be of type string: "integer"'
        ),
        # a null in a non-nullable field is pruned, so the required field is then missing
        f"{MASTER}.template.spec.containers": "Required value",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name": "Required value",
        "spec.runPolicy.backoffLimit": (
            "Invalid value: 2147483648: spec.runPolicy.backoffLimit in body must be of type int32: "
            '"2147483648"'
        ),
    }


def test_enum_is_refused_with_the_supported_values(registry: SchemaRegistry) -> None:
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "spec": {"mpiImplementation": "LAM", "mpiReplicaSpecs": {}},
    }

    errors = invalid(registry, ("kubeflow.org", "v2beta1", "mpijobs"), job)

    assert errors == {
        "spec.mpiImplementation": 'Unsupported value: "LAM": supported values: "OpenMPI", "Intel", "MPICH"'
    }


def test_restart_policy_enum(registry: SchemaRegistry, tmp_path: Path) -> None:
    # The upstream v1 CRDs type restartPolicy as a plain string (the operator's webhook checks it), so a
    # real apiserver with these CRDs stores any string ...
    accepted = registry.validate_and_prune(*PYTORCH, pytorch_job(restartPolicy="Sometimes"))
    assert accepted["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "Sometimes"
    # ... and a CRD that enumerates it refuses the value, naming the field and the supported values.
    policy = {"type": "string", "enum": ["Always", "OnFailure", "Never", "ExitCode"]}
    widgets = write_crd(tmp_path, {"type": "object", "properties": {"restartPolicy": policy}})

    errors = invalid(widgets, WIDGETS, widget({"restartPolicy": "Sometimes"}))

    assert errors == {
        "spec.restartPolicy": (
            'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never", "ExitCode"'
        )
    }


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"type": "string", "maxLength": 3}, "abcd", "Too long: may not be more than 3 bytes"),
        (
            {"type": "string", "minLength": 2},
            "a",
            'Invalid value: "a": spec.v in body should be at least 2 chars long',
        ),
        (
            {"type": "string", "pattern": "^[a-z]+$"},
            "A1",
            "Invalid value: \"A1\": spec.v in body should match '^[a-z]+$'",
        ),
        (
            {"type": "integer", "minimum": 1},
            0,
            "Invalid value: 0: spec.v in body should be greater than or equal to 1",
        ),
        (
            {"type": "number", "maximum": 1.5},
            2,
            "Invalid value: 2: spec.v in body should be less than or equal to 1.5",
        ),
        (
            {"type": "array", "maxItems": 1, "items": {"type": "string"}},
            ["a", "b"],
            "Too many: 2: must have at most 1 items",
        ),
        (
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            [],
            "Invalid value: []: spec.v in body should have at least 1 items",
        ),
        (
            {"type": "string", "format": "date-time"},
            "yesterday",
            'Invalid value: "yesterday": spec.v in body must be of type date-time: "yesterday"',
        ),
        (
            {"type": "boolean"},
            "yes",
            'Invalid value: "string": spec.v in body must be of type boolean: "string"',
        ),
        (
            {"type": "integer"},
            1.5,
            'Invalid value: "number": spec.v in body must be of type integer: "number"',
        ),
        ({"type": "object"}, [], 'Invalid value: "array": spec.v in body must be of type object: "array"'),
        (
            {"type": "array", "items": {"type": "string"}},
            ["a", None],
            'Invalid value: "null": spec.v[1] in body must be of type string: "null"',
        ),
    ],
)
def test_value_limits(tmp_path: Path, schema: dict[str, Any], value: Any, message: str) -> None:
    widgets = write_crd(tmp_path, {"type": "object", "properties": {"v": schema}})

    errors = invalid(widgets, WIDGETS, widget({"v": value}))

    assert list(errors.values()) == [message]


def test_values_within_limits_pass(tmp_path: Path) -> None:
    properties = {
        "name": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
        "count": {"type": "integer", "minimum": 1, "maximum": 3},
        "at": {"type": "string", "format": "date-time"},
        "note": {"type": "string", "nullable": True},
    }
    widgets = write_crd(tmp_path, {"type": "object", "properties": properties})
    spec = {"name": "abc", "count": 3.0, "at": "2026-01-02T03:04:05Z", "note": None}

    result = widgets.validate_and_prune(*WIDGETS, widget(spec))

    assert result["spec"] == {"name": "abc", "count": 3, "at": "2026-01-02T03:04:05Z", "note": None}
    assert type(result["spec"]["count"]) is int


def test_int_or_string_accepts_both(registry: SchemaRegistry) -> None:
    job = pytorch_job()
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"cpu": 2, "memory": "1Gi"}, "requests": {"cpu": "500m"}}
    container["livenessProbe"] = {"httpGet": {"port": "http", "path": "/"}}
    container["readinessProbe"] = {"httpGet": {"port": 8080}}

    result = registry.validate_and_prune(*PYTORCH, job)

    out = result["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert out["resources"] == container["resources"]
    assert out["livenessProbe"]["httpGet"]["port"] == "http"
    assert out["readinessProbe"]["httpGet"]["port"] == 8080

    container["resources"] = {"limits": {"cpu": "lots", "memory": True}}
    errors = invalid(registry, PYTORCH, job)

    prefix = f"{MASTER}.template.spec.containers[0].resources.limits"
    assert errors[f"{prefix}.memory"] == (
        f'Invalid value: "boolean": {prefix}.memory in body must be of type integer,string: "boolean"'
    )
    assert errors[f"{prefix}.cpu"].startswith(f'Invalid value: "lots": {prefix}.cpu in body should match ')


# -------------------------------------------------------------------------------- pruning, defaults


def test_unknown_fields_are_pruned_without_touching_the_input(registry: SchemaRegistry) -> None:
    job = pytorch_job(bogus=True)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "creationTimestamp": None,
        "labels": {"a": "b"},
    }
    job["spec"]["extra"] = {"x": 1}
    job["unknownTopLevel"] = "dropped"
    job["metadata"]["annotations"] = {"note": "kept"}
    before = copy.deepcopy(job)

    result = registry.validate_and_prune(*PYTORCH, job)

    assert job == before
    assert "bogus" not in result["spec"]["pytorchReplicaSpecs"]["Master"]
    assert result["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert result["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] == {"labels": {"a": "b"}}
    assert "extra" not in result["spec"]
    assert "unknownTopLevel" not in result
    assert (result["apiVersion"], result["kind"], result["metadata"]) == (
        "kubeflow.org/v1",
        "PyTorchJob",
        before["metadata"],
    )


def test_defaults_are_applied_inside_present_objects(registry: SchemaRegistry) -> None:
    job = pytorch_job()
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "None", "suspend": None}
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]

    result = registry.validate_and_prune(*PYTORCH, job)

    assert result["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    out = result["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert out["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
    assert "elasticPolicy" not in result["spec"]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]


def test_preserve_unknown_fields_and_embedded_resources_are_kept(tmp_path: Path) -> None:
    spec_schema = {
        "type": "object",
        "properties": {
            "config": {"x-kubernetes-preserve-unknown-fields": True},
            "options": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"level": {"type": "integer"}, "known": {"type": "object", "properties": {}}},
            },
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            },
        },
    }
    widgets = write_crd(tmp_path, spec_schema)
    spec = {
        "config": {"anything": [1, {"deep": None}], "goes": "here"},
        "options": {"level": 3, "free": {"form": True}, "known": {"pruned": 1}},
        "template": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"x": 1},
            "other": 2,
        },
    }

    result = widgets.validate_and_prune(*WIDGETS, widget(spec))

    assert result["spec"] == {
        "config": spec["config"],
        "options": {"level": 3, "free": {"form": True}, "known": {}},
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
    }
    errors = invalid(widgets, WIDGETS, widget({"options": {"level": "high", "free": "still kept"}}))
    assert list(errors) == ["spec.options.level"]


def test_re2_only_pattern_is_ignored_not_fatal(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string", "pattern": r"^\p{L}+$"}, "n": {"type": "integer"}},
    }
    widgets = write_crd(tmp_path, schema)

    assert widgets.validate_and_prune(*WIDGETS, widget({"label": "héllo"}))["spec"] == {"label": "héllo"}
    assert list(invalid(widgets, WIDGETS, widget({"label": "x", "n": "1"}))) == ["spec.n"]

"""load_job's sources, kind resolution and error reporting."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_provider_training.kinds import all_kinds, get_kind
from airflow_provider_training.kinds.registry import import_family_modules
from airflow_provider_training.specs import PyTorchJob, SpecError, load_job, model_for
from airflow_provider_training.specs.loader import SPEC_MODULES
from tests.specs.helpers import pytorch, refused


def test_dict_is_validated_and_not_mutated():
    job = pytorch()
    before = copy.deepcopy(job)
    assert load_job(job) == before
    assert job == before


def test_yaml_text_and_file_give_the_same_manifest(tmp_path: Path):
    text = yaml.safe_dump(pytorch())
    path = tmp_path / "job.yaml"
    path.write_text(text)
    assert load_job(text) == load_job(path) == load_job(str(path)) == pytorch()


def test_missing_file_is_a_spec_error(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    refused(str(missing), str(missing), "cannot read the job file")


def test_broken_yaml_names_line_and_column():
    text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: [x\nspec: {}\n"
    with pytest.raises(SpecError) as info:
        load_job(text)
    ((where, what),) = info.value.errors
    assert where == "line 5, column 5"
    assert what.startswith("broken YAML: ")


def test_broken_yaml_file_names_the_file(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: PyTorchJob\n  spec: x\n")
    with pytest.raises(SpecError) as info:
        load_job(path)
    assert info.value.errors[0][0] == f"{path} line 2, column 7"


def test_unprintable_yaml_is_a_spec_error():
    refused("kind: \x07", "", "broken YAML", "unacceptable character")


@pytest.mark.parametrize(("source", "got"), [("- a\n- b\n", "list"), ("", "nothing")])
def test_yaml_must_be_a_mapping(source, got):
    refused(source, "", "must be a mapping", f"(got {got})")


def test_other_types_are_refused():
    refused(42, "", "a dict, YAML text, a YAML file path or a pydantic model", "(got int)")


def test_pydantic_model_is_accepted():
    model = PyTorchJob.model_validate(pytorch())
    assert load_job(model) == pytorch()


def test_model_built_from_python_names():
    model = PyTorchJob(
        metadata={"name": "py"},
        spec={
            "replica_specs": {
                "Worker": {
                    "replicas": 1,
                    "restart_policy": "Never",
                    "template": pytorch()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"],
                }
            }
        },
    )
    manifest = load_job(model)
    assert manifest["apiVersion"] == "kubeflow.org/v1"
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"


def test_status_of_a_fetched_object_is_dropped():
    job = pytorch()
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    assert "status" not in load_job(job)


def test_pod_template_may_be_a_client_model():
    from kubernetes.client import (
        V1Container,
        V1ObjectMeta,
        V1PodSpec,
        V1PodTemplateSpec,
        V1ResourceRequirements,
    )

    template = V1PodTemplateSpec(
        metadata=V1ObjectMeta(labels={"team": "ml"}),
        spec=V1PodSpec(
            containers=[
                V1Container(
                    name="pytorch", image="img", resources=V1ResourceRequirements(limits={"cpu": "1"})
                )
            ]
        ),
    )
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = template
    assert load_job(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] == {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {"containers": [{"name": "pytorch", "image": "img", "resources": {"limits": {"cpu": "1"}}}]},
    }


def test_kind_argument_fills_a_manifest_without_type_meta():
    job = pytorch()
    del job["apiVersion"], job["kind"]
    assert load_job(job, kind="PyTorchJob")["kind"] == "PyTorchJob"
    assert load_job(job, kind=get_kind("PyTorchJob"))["apiVersion"] == "kubeflow.org/v1"


def test_kind_argument_and_manifest_must_agree():
    refused(pytorch(), "kind", "the manifest says 'PyTorchJob' but 'TFJob' was asked for", kind="TFJob")


def test_api_version_must_match_the_kind_argument():
    job = pytorch()
    job["apiVersion"] = "kubeflow.org/v2"
    refused(
        job, "apiVersion", "must be kubeflow.org/v1", "got 'kubeflow.org/v2'", kind=get_kind("PyTorchJob")
    )


def test_unknown_api_version_lists_the_known_ones():
    job = pytorch()
    job["apiVersion"] = "kubeflow.org/v2beta1"
    refused(job, "apiVersion", "not known in apiVersion 'kubeflow.org/v2beta1'", "kubeflow.org/v1")


def test_unknown_kind_lists_the_known_kinds():
    job = pytorch()
    job["kind"] = "PytorchJob"
    error = refused(
        job,
        "kind",
        "unknown training job kind 'PytorchJob'",
        "did you mean PyTorchJob?",
        "TFJob (kubeflow.org/v1)",
    )
    assert isinstance(error, ValueError)


def test_missing_kind_lists_the_known_kinds():
    job = pytorch()
    del job["kind"]
    refused(job, "kind", "required", "JAXJob (kubeflow.org/v1)")


def test_spec_error_survives_pickling():
    with pytest.raises(SpecError) as info:
        load_job(pytorch(), kind="TFJob")
    copy_ = pickle.loads(pickle.dumps(info.value))
    assert (copy_.errors, copy_.kind, str(copy_)) == (info.value.errors, info.value.kind, str(info.value))


def test_loading_a_dict_job_does_not_import_a_kubernetes_client():
    code = (
        "import sys\n"
        "from airflow_provider_training.specs import load_job\n"
        "from tests.specs.helpers import pytorch\n"
        "load_job(pytorch())\n"
        "print(','.join(m for m in ('kubernetes', 'kubernetes_asyncio') if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == ""


def test_a_kind_without_a_spec_model_is_checked_for_its_name_only(monkeypatch):
    from airflow_provider_training.kinds import (
        JobKind,
        JobState,
        JobStatus,
        ReplicaPod,
        ResourceRef,
        registry,
    )

    demo = JobKind(
        resource=ResourceRef("example.com", "v1", "demojobs", "DemoJob"),
        family="demo",
        replica_types=("node",),
        default_container="main",
        read_status=lambda job, children: JobStatus(JobState.PENDING),
        pod_selector=lambda name: f"demo={name}",
        master_selector=lambda name: f"demo={name}",
        replica_of_pod=lambda pod: ReplicaPod("node", 0, ""),
    )
    known = registry.all_kinds()
    monkeypatch.setattr(registry, "_load_kinds", lambda: (*known, demo))
    job = {
        "apiVersion": "example.com/v1",
        "kind": "DemoJob",
        "metadata": {"name": "d"},
        "spec": {"anything": [1]},
    }
    assert load_job(job) == job
    job["metadata"]["name"] = "D"
    refused(job, "metadata.name", "DNS-1035")


def test_every_spec_module_exists_and_models_known_kinds():
    modules = import_family_modules(SPEC_MODULES)
    assert [module.__name__ for module in modules] == list(SPEC_MODULES)
    known = {(kind.api_version, kind.kind): kind for kind in all_kinds()}
    for model in (model for module in modules for model in module.MODELS):
        assert model_for(known[model.API_VERSION, model.KIND]) is model

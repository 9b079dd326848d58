from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_provider_training.kinds import all_kinds, get_kind
from airflow_provider_training.kinds.registry import FAMILY_MODULES, import_family_modules

KUBEFLOW = {
    "TFJob": ("tfjobs", "tfReplicaSpecs", "tensorflow"),
    "PyTorchJob": ("pytorchjobs", "pytorchReplicaSpecs", "pytorch"),
    "MXJob": ("mxjobs", "mxReplicaSpecs", "mxnet"),
    "XGBoostJob": ("xgboostjobs", "xgbReplicaSpecs", "xgboost"),
    "PaddleJob": ("paddlejobs", "paddleReplicaSpecs", "paddle"),
    "MPIJob": ("mpijobs", "mpiReplicaSpecs", "mpi"),
    "JAXJob": ("jaxjobs", "jaxReplicaSpecs", "jax"),
}


@pytest.mark.parametrize("name", sorted(KUBEFLOW))
def test_kubeflow_kinds(name):
    kind = get_kind(name, "kubeflow.org/v1")
    assert kind is get_kind(name)
    assert (kind.resource.plural, kind.replica_spec_key, kind.default_container) == KUBEFLOW[name]
    assert kind.resource.key == f"{KUBEFLOW[name][0]}.kubeflow.org"
    assert kind.api_version == "kubeflow.org/v1"
    assert kind.family == "kubeflow"
    assert kind.children == ()


def test_replica_types_are_the_operators_casing():
    assert get_kind("TFJob").replica_types == ("Chief", "PS", "Worker", "Evaluator", "Master")
    assert get_kind("MPIJob").replica_types == ("Launcher", "Worker")
    assert get_kind("JAXJob").replica_types == ("Worker",)


def test_all_kinds_holds_every_kubeflow_kind_once():
    names = [(k.kind, k.api_version) for k in all_kinds()]
    assert len(names) == len(set(names))
    assert {(n, "kubeflow.org/v1") for n in KUBEFLOW} <= set(names)
    assert FAMILY_MODULES[0] == "airflow_provider_training.kinds.kubeflow"


def test_unknown_kind_lists_the_known_ones_and_hints_at_casing():
    with pytest.raises(ValueError, match="unknown training job kind 'pytorchjob'") as info:
        get_kind("pytorchjob")
    assert "did you mean PyTorchJob?" in str(info.value)
    assert "PyTorchJob (kubeflow.org/v1)" in str(info.value)
    assert "JAXJob (kubeflow.org/v1)" in str(info.value)


def test_unknown_api_version_lists_the_known_versions():
    with pytest.raises(ValueError, match=r"MPIJob is not known in apiVersion 'kubeflow.org/v3'") as info:
        get_kind("MPIJob", "kubeflow.org/v3")
    assert "kubeflow.org/v1, batch.tensorstack.dev/v1beta1, kubeflow.org/v2beta1" in str(info.value)


def test_importing_kinds_loads_no_client_and_no_pydantic():
    code = (
        "import sys, airflow_provider_training.kinds as k\n"
        "k.all_kinds()\n"
        "bad = [m for m in ('kubernetes', 'kubernetes_asyncio', 'pydantic') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_family_module_exists_and_gives_kinds():
    modules = import_family_modules(FAMILY_MODULES)
    assert [module.__name__ for module in modules] == list(FAMILY_MODULES)
    assert all(module.KINDS for module in modules)
    assert [kind for module in modules for kind in module.KINDS] == all_kinds()


def test_a_listed_module_that_does_not_exist_is_an_error_not_skipped():
    with pytest.raises(ModuleNotFoundError, match=r"kinds\.no_such_family"):
        import_family_modules(["airflow_provider_training.kinds.no_such_family"])


def test_family_modules_are_imported_on_the_first_lookup_only():
    code = (
        "import sys, airflow_provider_training.kinds as k\n"
        f"families = {list(FAMILY_MODULES)!r}\n"
        "print(sum(m in sys.modules for m in families), end=' ')\n"
        "k.get_kind('PyTorchJob')\n"
        "print(sum(m in sys.modules for m in families))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", str(len(FAMILY_MODULES))]

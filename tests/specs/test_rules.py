"""Every operator rule refuses a bad spec with the field path and the allowed values."""

from __future__ import annotations

import pytest

from airflow_provider_training.specs import SpecError, load_job
from tests.specs.helpers import container, manifest, pytorch, refused, replica

PT = "spec.pytorchReplicaSpecs"


def test_valid_pytorch_job_loads():
    assert load_job(pytorch())["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_wrong_replica_type_names_the_key_and_the_allowed_types():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Foo"] = replica(1, container("pytorch"))
    refused(job, f"{PT}.Foo", "unknown replica type 'Foo'", "allowed: Master, Worker")


@pytest.mark.parametrize(
    ("kind", "key", "allowed"),
    [
        ("TFJob", "tfReplicaSpecs", "Chief, PS, Worker, Evaluator, Master"),
        ("XGBoostJob", "xgbReplicaSpecs", "Master, Worker"),
        ("PaddleJob", "paddleReplicaSpecs", "Master, Worker"),
        ("JAXJob", "jaxReplicaSpecs", "Worker"),
        ("MPIJob", "mpiReplicaSpecs", "Launcher, Worker"),
    ],
)
def test_wrong_replica_type_for_other_kinds(kind, key, allowed):
    job = manifest(kind, key, {"Launcher" if kind == "JAXJob" else "Driver": replica(1, container("x"))})
    with pytest.raises(SpecError) as info:
        load_job(job)
    assert any(where.startswith(f"spec.{key}.") and allowed in text for where, text in info.value.errors)


def test_lower_case_replica_types_are_written_in_the_kinds_casing():
    job = manifest(
        "TFJob",
        "tfReplicaSpecs",
        {"ps": replica(1, container("tensorflow")), "worker": replica(2, container("tensorflow"))},
    )
    assert list(load_job(job)["spec"]["tfReplicaSpecs"]) == ["PS", "Worker"]


def test_both_casings_of_one_type_are_refused_not_merged():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["worker"] = replica(1, container("pytorch"))
    refused(job, f"{PT}.worker", "unknown replica type", "allowed: Master, Worker")


def test_missing_containers():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = {"replicas": 1}
    refused(job, f"{PT}.Worker.template.spec.containers", "at least one container", "'pytorch'")


def test_default_container_name_is_required():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = replica(1, container("main"), container("sidecar"))
    refused(job, f"{PT}.Worker.template.spec.containers", "named 'pytorch'", "got 'main', 'sidecar'")


def test_every_container_needs_an_image_and_a_name():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = replica(
        1, container("pytorch"), {"image": "x"}, container("b", None)
    )
    error = refused(job, f"{PT}.Worker.template.spec.containers[1].name", "required")
    assert (f"{PT}.Worker.template.spec.containers[2].image", "required") in error.errors


def test_restart_policy_values():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    refused(
        job, f"{PT}.Worker.restartPolicy", "'Always', 'OnFailure', 'Never' or 'ExitCode'", "got 'Sometimes'"
    )


def test_pytorch_master_with_two_replicas_has_the_documented_message():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    error = refused(job, f"{PT}.Master.replicas", "must be exactly 1 for Master (got 2)")
    assert str(error) == (
        "PyTorchJob spec is invalid: "
        "spec.pytorchReplicaSpecs.Master.replicas: must be exactly 1 for Master (got 2)"
    )


def test_pytorch_master_replicas_must_be_written_out():
    job = pytorch()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    refused(job, f"{PT}.Master.replicas", "must be exactly 1", "got none")


def test_pytorch_worker_needs_at_least_one_replica():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    refused(job, f"{PT}.Worker.replicas", "at least 1 for Worker (got 0)")


def test_elastic_policy_requires_a_worker():
    job = pytorch(elasticPolicy={"minReplicas": 1, "maxReplicas": 3})
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]
    refused(job, f"{PT}.Worker", "required when spec.elasticPolicy is set")


def test_both_nproc_settings_are_refused():
    job = pytorch(elasticPolicy={"nProcPerNode": 2}, nprocPerNode="2")
    refused(job, "spec.elasticPolicy.nProcPerNode", "spec.nprocPerNode")


@pytest.mark.parametrize(
    ("value", "ok"), [("auto", True), ("gpu", True), ("4", True), (4, True), ("0", False), ("many", False)]
)
def test_nproc_per_node_values(value, ok):
    job = pytorch(nprocPerNode=value)
    if ok:
        assert load_job(job)["spec"]["nprocPerNode"] == str(value)
    else:
        refused(job, "spec.nprocPerNode", "'auto', 'cpu', 'gpu' or a positive integer")


def test_rdzv_backend_values():
    refused(
        pytorch(elasticPolicy={"rdzvBackend": "zookeeper"}),
        "spec.elasticPolicy.rdzvBackend",
        "'c10d', 'etcd' or 'etcd-v2'",
    )


XGB = "spec.xgbReplicaSpecs"


def test_xgboost_master_is_required():
    job = manifest("XGBoostJob", "xgbReplicaSpecs", {"Worker": replica(2, container("xgboost"))})
    refused(job, f"{XGB}.Master", "required")


def test_xgboost_master_must_have_one_replica():
    job = manifest("XGBoostJob", "xgbReplicaSpecs", {"Master": replica(3, container("xgboost"))})
    refused(job, f"{XGB}.Master.replicas", "exactly 1 for Master (got 3)")


def test_tf_job_with_chief_and_master_is_refused():
    job = manifest(
        "TFJob",
        "tfReplicaSpecs",
        {"Chief": replica(1, container("tensorflow")), "Master": replica(1, container("tensorflow"))},
    )
    refused(job, "spec.tfReplicaSpecs", "more than one Chief or Master")


def test_tf_success_policy_values():
    job = manifest(
        "TFJob", "tfReplicaSpecs", {"Worker": replica(2, container("tensorflow"))}, successPolicy="Most"
    )
    refused(job, "spec.successPolicy", "'' or 'AllWorkers'")


MPI = "spec.mpiReplicaSpecs"


def test_mpi_launcher_is_required():
    job = manifest("MPIJob", "mpiReplicaSpecs", {"Worker": replica(2, container("mpi"))})
    refused(job, f"{MPI}.Launcher", "required")


def test_mpi_launcher_must_be_one():
    job = manifest(
        "MPIJob",
        "mpiReplicaSpecs",
        {"Launcher": replica(2, container("mpi")), "Worker": replica(2, container("mpi"))},
    )
    refused(job, f"{MPI}.Launcher.replicas", "exactly 1 for Launcher (got 2)")


def test_mpi_accepts_any_container_name_and_unset_launcher_replicas():
    job = manifest(
        "MPIJob",
        "mpiReplicaSpecs",
        {"Launcher": replica(None, container("launcher")), "Worker": replica(None, container("w"))},
    )
    assert load_job(job)["spec"]["mpiReplicaSpecs"]["Launcher"] == job["spec"]["mpiReplicaSpecs"]["Launcher"]


def test_mpi_top_level_clean_pod_policy_values():
    job = manifest(
        "MPIJob", "mpiReplicaSpecs", {"Launcher": replica(1, container("mpi"))}, cleanPodPolicy="Always"
    )
    refused(job, "spec.cleanPodPolicy", "'All', 'Running' or 'None'")


def test_mx_job_mode_is_required_and_checked():
    job = manifest("MXJob", "mxReplicaSpecs", {"Scheduler": replica(1, container("mxnet"))})
    refused(job, "spec.jobMode", "required")
    job["spec"]["jobMode"] = "dist"
    refused(job, "spec.jobMode", "'MXTrain' or 'MXTune'")


def test_run_policy_clean_pod_policy_values():
    refused(
        pytorch(runPolicy={"cleanPodPolicy": "Finished"}),
        "spec.runPolicy.cleanPodPolicy",
        "'All', 'Running' or 'None'",
    )


def test_run_policy_numbers_are_not_coerced_from_text():
    refused(
        pytorch(runPolicy={"backoffLimit": "3"}), "spec.runPolicy.backoffLimit", "valid integer", "got '3'"
    )


def test_unknown_spec_key_names_the_key_and_the_allowed_keys():
    job = pytorch()
    job["spec"]["cleanPodPolicy"] = "All"  # belongs under runPolicy for PyTorchJob
    refused(
        job,
        "spec.cleanPodPolicy",
        "unknown field",
        "allowed: elasticPolicy, nprocPerNode, pytorchReplicaSpecs, runPolicy",
    )


def test_unknown_key_deep_inside_names_the_allowed_keys_there():
    job = pytorch(runPolicy={"schedulingPolicy": {"queueName": "q"}})
    refused(job, "spec.runPolicy.schedulingPolicy.queueName", "unknown field", "minAvailable", "queue")


def test_unknown_replica_spec_key():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 3
    refused(job, f"{PT}.Worker.replica", "allowed: replicas, restartPolicy, template")


def test_unknown_top_level_key():
    job = pytorch()
    job["specs"] = {}
    refused(job, "specs", "unknown field", "apiVersion, kind, metadata, spec")


def test_replica_spec_map_is_required():
    job = pytorch()
    del job["spec"]["pytorchReplicaSpecs"]
    refused(job, PT, "required")


@pytest.mark.parametrize("name", ["Train", "train_job", "1train", "train-", "-train"])
def test_name_must_be_a_dns_1035_label(name):
    job = pytorch()
    job["metadata"]["name"] = name
    refused(job, "metadata.name", "DNS-1035", repr(name))


def test_name_must_leave_room_for_the_longest_pod_name():
    job = pytorch()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 12  # "-worker-11"
    job["metadata"]["name"] = "a" * 54
    refused(job, "metadata.name", "at most 53 characters", "-worker-11", "(got 54)")
    job["metadata"]["name"] = "a" * 53
    assert load_job(job)["metadata"]["name"] == "a" * 53


def test_label_values_must_be_text():
    job = pytorch()
    job["metadata"]["labels"] = {"version": 2}
    refused(job, "metadata.labels.version", "valid string")


def test_all_errors_are_reported_at_once():
    job = pytorch()
    job["metadata"]["name"] = "Bad"
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(SpecError) as info:
        load_job(job)
    paths = [where for where, _ in info.value.errors]
    assert paths == ["metadata.name", f"{PT}.Worker.template.spec.containers", f"{PT}.Master.replicas"]
    assert str(info.value).startswith("PyTorchJob spec is invalid (3 errors):\n  - metadata.name: ")

"""Which replica type decides a job, per kind (the default ``log_replicas`` follows it): kind data read by one
generic method, for the upstream examples whose pods have no master role too."""

from __future__ import annotations

import pytest
import yaml

from airflow_provider_training.kinds import get_kind
from tests.fixtures import upstream_example

MXJOB_TUNE = """
apiVersion: kubeflow.org/v1
kind: MXJob
metadata: {name: auto-tuning-job}
spec:
  jobMode: MXTune
  mxReplicaSpecs:
    TunerTracker: {replicas: 1, template: {spec: {containers: [{name: mxnet, image: tvm}]}}}
    TunerServer: {replicas: 1, template: {spec: {containers: [{name: mxnet, image: tvm}]}}}
    Tuner: {replicas: 1, template: {spec: {containers: [{name: mxnet, image: tvm}]}}}
"""


def job(kind: str, api_version: str, spec: dict) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "j"}, "spec": spec}


def replicas(key: str, **counts: int) -> dict:
    return {key: {name: {"replicas": n} for name, n in counts.items()}}


def t9k(kind: str, **counts: int) -> dict:
    spec = {"replicaSpecs": [{"type": name, "replicas": n} for name, n in counts.items()]}
    return job(kind, "batch.tensorstack.dev/v1beta1", spec)


V1 = "kubeflow.org/v1"
CASES = [
    (
        "PaddleJob upstream simple-cpu (Worker only)",
        upstream_example("kubeflow-v1", "paddlepaddle_simple-cpu.yaml"),
        "Worker",
    ),
    (
        "PaddleJob with Master",
        job("PaddleJob", V1, replicas("paddleReplicaSpecs", Master=1, Worker=2)),
        "Master",
    ),
    (
        "PaddleJob with Master replicas 0",
        job("PaddleJob", V1, replicas("paddleReplicaSpecs", Master=0, Worker=2)),
        "Worker",
    ),
    ("MXJob tune (no Scheduler, no Worker): the first replica", yaml.safe_load(MXJOB_TUNE), "TunerTracker"),
    (
        "MXJob train",
        job(
            "MXJob", V1, {"jobMode": "MXTrain", **replicas("mxReplicaSpecs", Worker=2, Server=1, Scheduler=1)}
        ),
        "Scheduler",
    ),
    ("TFJob with Chief", job("TFJob", V1, replicas("tfReplicaSpecs", PS=1, Worker=2, Chief=1)), "Chief"),
    ("TFJob with Master", job("TFJob", V1, replicas("tfReplicaSpecs", PS=1, Master=1, Worker=2)), "Master"),
    ("TFJob workers only", job("TFJob", V1, replicas("tfReplicaSpecs", PS=1, Worker=2)), "Worker"),
    ("PyTorchJob", job("PyTorchJob", V1, replicas("pytorchReplicaSpecs", Worker=2, Master=1)), "Master"),
    ("PyTorchJob elastic", job("PyTorchJob", V1, replicas("pytorchReplicaSpecs", Worker=3)), "Worker"),
    ("XGBoostJob", job("XGBoostJob", V1, replicas("xgbReplicaSpecs", Worker=2, Master=1)), "Master"),
    ("MPIJob", job("MPIJob", V1, replicas("mpiReplicaSpecs", Worker=2, Launcher=1)), "Launcher"),
    ("JAXJob", job("JAXJob", V1, replicas("jaxReplicaSpecs", Worker=2)), "Worker"),
    ("T9k TF with chief", t9k("TensorFlowTrainingJob", ps=1, worker=2, chief=1), "chief"),
    ("T9k TF without chief", t9k("TensorFlowTrainingJob", ps=1, worker=2), "worker"),
    ("T9k PyTorch master", t9k("PyTorchTrainingJob", worker=2, master=1), "master"),
    ("T9k PyTorch nodes: the first", t9k("PyTorchTrainingJob", node=2), "node"),
    ("T9k GenericJob: the first", t9k("GenericJob", server=1, client=2), "server"),
    ("EDL TrainingJob: the trainers", job("TrainingJob", "paddlepaddle.org/v1", {"trainer": {}}), "TRAINER"),
    (
        "mlkube MxJob dist",
        job(
            "MxJob",
            "mxnet.mlkube.io/v1beta1",
            {
                "jobMode": "dist",
                "replicaSpecs": [
                    {"mxReplicaType": "SCHEDULER"},
                    {"mxReplicaType": "SERVER"},
                    {"mxReplicaType": "WORKER"},
                ],
            },
        ),
        "SCHEDULER",
    ),
    ("mlkube MxJob local", job("MxJob", "mxnet.mlkube.io/v1beta1", {"replicaSpecs": [{}]}), "WORKER"),
]


@pytest.mark.parametrize("manifest,deciding", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_deciding_replica(manifest, deciding):
    kind = get_kind(manifest["kind"], manifest["apiVersion"])

    assert kind.deciding_replica(manifest) == deciding

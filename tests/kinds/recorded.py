"""Job objects as the kubeflow.org/v1 operator leaves them, written from the reference: conditions keyed by
type and appended at the end, Running flipped to False on Succeeded/Failed, per-kind reasons."""

from __future__ import annotations

from typing import Any

CREATED_AT = "2026-03-02T10:00:00Z"


def job(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default", "uid": "0b1c", "creationTimestamp": CREATED_AT},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def cond(type_: str, status: str, reason: str, message: str = "", at: str = "2026-03-02T10:00:05Z") -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    }


def replica(replicas: int | None = None, container: str = "main") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": container, "image": "busybox"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


TF_SUCCEEDED_PS_RUNNING = job(
    "TFJob",
    "dist-mnist",
    {"tfReplicaSpecs": {"PS": replica(1), "Worker": replica(2)}},
    {
        "conditions": [
            cond("Created", "True", "TFJobCreated", "TFJob dist-mnist is created.", "2026-03-02T10:00:01Z"),
            cond("Running", "False", "TFJobRunning", "TFJob dist-mnist is running.", "2026-03-02T10:04:00Z"),
            cond(
                "Succeeded",
                "True",
                "TFJobSucceeded",
                "TFJob default/dist-mnist successfully completed.",
                "2026-03-02T10:04:00Z",
            ),
        ],
        "replicaStatuses": {"PS": {"active": 1}, "Worker": {"succeeded": 2}},
        "startTime": "2026-03-02T10:00:02Z",
        "completionTime": "2026-03-02T10:04:00Z",
    },
)

PYTORCH_RESTARTING = job(
    "PyTorchJob",
    "mnist",
    {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}},
    {
        "conditions": [
            cond("Created", "True", "PyTorchJobCreated", "PyTorchJob mnist is created."),
            cond(
                "Restarting",
                "True",
                "PyTorchJobRestarting",
                "PyTorchJob mnist is restarting because 1 Worker replica(s) failed.",
                "2026-03-02T10:02:00Z",
            ),
        ],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2, "failed": 1}},
        "startTime": "2026-03-02T10:00:02Z",
    },
)

MPI_FAILED = job(
    "MPIJob",
    "tensorflow-mnist",
    {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": replica(1, "mpi"), "Worker": replica(2, "mpi")}},
    {
        "conditions": [
            cond("Created", "True", "MPIJobCreated", "MPIJob default/tensorflow-mnist is created."),
            cond("Running", "False", "MPIJobRunning", "launcher pod is running", "2026-03-02T10:01:00Z"),
            cond(
                "Failed",
                "True",
                "MPIJobMPIJobFailed",
                "MPIJob default/tensorflow-mnist has failed",
                "2026-03-02T10:03:00Z",
            ),
        ],
        "replicaStatuses": {"Launcher": {"failed": 1}, "Worker": {"active": 2}},
        "startTime": "2026-03-02T10:00:02Z",
        "completionTime": "2026-03-02T10:03:00Z",
    },
)

# Issue #1650: Succeeded=True followed by Running=True; `kubectl get` shows the last one, "Running".
MX_SUCCEEDED_THEN_RUNNING = job(
    "MXJob",
    "mxnet-job",
    {
        "jobMode": "MXTrain",
        "mxReplicaSpecs": {"Scheduler": replica(1), "Server": replica(1), "Worker": replica(1)},
    },
    {
        "conditions": [
            cond("Created", "True", "MXJobCreated"),
            cond("Succeeded", "True", "MXJobSucceeded", "MXJob mxnet-job is successfully completed."),
            cond("Running", "True", "MXJobRunning", "MXJob mxnet-job is running."),
        ],
        "replicaStatuses": {
            "Scheduler": {"succeeded": 1},
            "Server": {"active": 1},
            "Worker": {"succeeded": 1},
        },
        "startTime": "2026-03-02T10:00:02Z",
        "completionTime": "2026-03-02T10:05:00Z",
    },
)

XGB_FAILED_AND_SUCCEEDED = job(
    "XGBoostJob",
    "iris",
    {"xgbReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    {
        "conditions": [
            cond("Created", "True", "XGBoostJobCreated"),
            cond("Succeeded", "True", "XGBoostJobSucceeded", "XGBoostJob iris is successfully completed."),
            cond(
                "Failed",
                "True",
                "XGBoostJobFailed",
                "XGBoostJob iris has failed because it has reached the specified backoff limit",
            ),
        ],
        "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"failed": 2}},
    },
)

PADDLE_SUSPENDED = job(
    "PaddleJob",
    "paddle-simple-cpu",
    {"runPolicy": {"suspend": True}, "paddleReplicaSpecs": {"Worker": replica(2)}},
    {
        "conditions": [
            cond("Created", "True", "PaddleJobCreated"),
            cond("Running", "False", "PaddleJobSuspended", "PaddleJob paddle-simple-cpu is suspended."),
            cond("Suspended", "True", "PaddleJobSuspended", "PaddleJob paddle-simple-cpu is suspended."),
        ],
        "replicaStatuses": {"Worker": {}},
    },
)

# Resumed: Suspended flips to False with reason <Kind>Resumed; there is no "Resumed" condition type.
PADDLE_RESUMED = job(
    "PaddleJob",
    "paddle-simple-cpu",
    {"paddleReplicaSpecs": {"Worker": replica(2)}},
    {
        "conditions": [
            cond("Created", "True", "PaddleJobCreated", "PaddleJob paddle-simple-cpu is created."),
            cond("Running", "False", "PaddleJobSuspended", "PaddleJob paddle-simple-cpu is suspended."),
            cond("Suspended", "False", "PaddleJobResumed", "PaddleJob paddle-simple-cpu is resumed."),
        ],
        "replicaStatuses": {"Worker": {}},
    },
)

JAX_RUNNING = job(
    "JAXJob",
    "jaxjob-simple",
    {"jaxReplicaSpecs": {"Worker": replica(2)}},
    {
        "conditions": [
            cond("Created", "True", "JAXJobCreated"),
            cond("Running", "True", "JAXJobRunning", "JAXJob jaxjob-simple is running."),
        ],
        "replicaStatuses": {
            "Worker": {
                "active": 2,
                "selector": "training.kubeflow.org/job-name=jaxjob-simple,"
                "training.kubeflow.org/operator-name=jaxjob-controller,training.kubeflow.org/replica-type=worker",
            }
        },
        "startTime": "2026-03-02T10:00:02Z",
    },
)

PYTORCH_NO_STATUS = job("PyTorchJob", "fresh", {"pytorchReplicaSpecs": {"Worker": replica(2)}})
MPI_NO_STATUS = job(
    "MPIJob",
    "fresh-mpi",
    {"mpiReplicaSpecs": {"Launcher": replica(None, "mpi"), "Worker": replica(None, "mpi")}},
    {},
)

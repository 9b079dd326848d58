"""The dict Airflow's provider discovery reads; kept apart so importing the package stays cheap.

No ``connection-types``: the provider uses the cncf.kubernetes ``kubernetes`` connection type, which that
provider registers; registering it twice would make two hooks claim one type.

No ``plugins``: the plugin is the ``airflow.plugins`` entry point, which every component loads; a second
registration here is refused as a duplicate (a plugin import error) where providers load eagerly
(docs/design.md).
"""

from __future__ import annotations

from typing import Any

INTEGRATION = "Distributed Training"

PROVIDER_INFO: dict[str, Any] = {
    "package-name": "airflow-provider-training",
    "name": "Distributed Training",
    "description": "Operators, sensors and triggers for distributed training jobs on Kubernetes "
    "(Kubeflow Training Operator, Kubeflow Trainer v2, the MPI Operator, PaddlePaddle EDL, legacy MXNet, "
    "TensorStack T9k).",
    "versions": ["0.1.0"],
    "integrations": [
        {
            "integration-name": INTEGRATION,
            "external-doc-url": "https://www.kubeflow.org/docs/components/trainer/legacy-v1/",
            "tags": ["software"],
        }
    ],
    "operators": [
        {
            "integration-name": INTEGRATION,
            "python-modules": [
                "airflow_provider_training.operators.training",
                "airflow_provider_training.operators.kubeflow",
                "airflow_provider_training.operators.paddle_edl",
                "airflow_provider_training.operators.mxnet_legacy",
                "airflow_provider_training.operators.tensorstack",
                "airflow_provider_training.operators.trainer",
                "airflow_provider_training.operators.mpi_operator",
                "airflow_provider_training.operators.control",
            ],
        }
    ],
    "sensors": [
        {
            "integration-name": INTEGRATION,
            "python-modules": [
                "airflow_provider_training.sensors.training",
                "airflow_provider_training.sensors.kubeflow",
                "airflow_provider_training.sensors.paddle_edl",
                "airflow_provider_training.sensors.mxnet_legacy",
                "airflow_provider_training.sensors.tensorstack",
                "airflow_provider_training.sensors.trainer",
                "airflow_provider_training.sensors.mpi_operator",
            ],
        }
    ],
    "hooks": [
        {"integration-name": INTEGRATION, "python-modules": ["airflow_provider_training.hooks.training"]}
    ],
    "triggers": [
        {"integration-name": INTEGRATION, "python-modules": ["airflow_provider_training.triggers.training"]}
    ],
    "task-decorators": [
        {
            "name": "pytorch_job",
            "class-name": "airflow_provider_training.decorators.pytorch_job.pytorch_job_task",
        },
        {"name": "train_job", "class-name": "airflow_provider_training.decorators.train_job.train_job_task"},
    ],
    "extra-links": ["airflow_provider_training.links.TrainingJobLink"],
    "config": {
        "training": {
            "description": "Defaults of the distributed-training provider.",
            "options": {
                "job_url_template": {
                    "description": "URL of a job's page for the 'Training Job' link, with the fields "
                    "{namespace}, {name}, {kind}, {plural} and {uid}: one template for every kind, or a "
                    "JSON object of templates by kind, family (kubeflow, mpi-operator, mxnet-legacy, "
                    "paddle-edl, tensorstack, trainer) and 'default'. The connection extra "
                    "training_job_url_template is asked first. Empty: no link.",
                    "version_added": "0.1.0",
                    "type": "string",
                    "example": "https://kubeflow.example.com/_/training/#/{namespace}/{plural}/{name}",
                    "default": "",
                },
                "startup_timeout": {
                    "description": "Seconds after a job's creation within which one replica pod must start; "
                    "otherwise the wait ends with a timeout (operators' default).",
                    "version_added": "0.1.0",
                    "type": "float",
                    "example": "1800",
                    "default": "600",
                },
                "status_grace_period": {
                    "description": "Seconds a new job may have no status before the wait reports that its "
                    "training operator seems not to be running (operators and sensors; shorter or longer "
                    "than the default).",
                    "version_added": "0.1.0",
                    "type": "float",
                    "example": "120",
                    "default": "60",
                },
            },
        }
    },
}

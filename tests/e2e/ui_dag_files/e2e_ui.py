"""Deferrable PyTorchJobs for the Training tab's browser test (localkube, scripted).

``e2e_ui``: each replica writes its first line, then holds at the gate ``training-tab`` until the test has
seen the tab follow it live; the test then opens the gate, and each replica writes two more lines and exits 0.

``e2e_ui_restart``: the same, holding at ``training-tab-restart`` while the test restarts the api-server with
a log stream open; after the gate each replica writes one more line and exits 0.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

GATE = "training-tab"
RESTART_GATE = "training-tab-restart"


def gated_script(gate: str, before: str, after: list[str]) -> dict[str, Any]:
    return {"default": {"duration": 0, "logs": [before], "gate": gate, "after_gate": after}}


def training_dag(dag_id: str, job_name: str, script: dict[str, Any]) -> DAG:
    with DAG(dag_id, schedule=None, catchup=False) as dag:
        PyTorchJobOperator(
            task_id="train",
            job=scripted_job("PyTorchJob", script, {"Master": 1, "Worker": 1}),
            job_name=job_name,
            deferrable=True,
            log_replicas="all",
            poll_interval=0.5,
        )
    return dag


dag = training_dag(
    "e2e_ui",
    "e2e-ui",
    gated_script(GATE, "{pod}: epoch 1 loss 0.41", ["{pod}: epoch 2 loss 0.30", "{pod}: model saved"]),
)
restart_dag = training_dag(
    "e2e_ui_restart",
    "e2e-ui-restart",
    gated_script(RESTART_GATE, "{pod}: before the restart", ["{pod}: after the restart"]),
)

"""A deferrable PyTorchJob for the Training tab's browser test (localkube, scripted).

Each replica writes its first line, then holds at the gate ``training-tab`` until the test has seen the tab
follow it live; the test then opens the gate, and each replica writes two more lines and exits 0.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

GATE = "training-tab"
SCRIPT = {
    "default": {
        "duration": 0,
        "logs": ["{pod}: epoch 1 loss 0.41"],
        "gate": GATE,
        "after_gate": ["{pod}: epoch 2 loss 0.30", "{pod}: model saved"],
    }
}

with DAG("e2e_ui", schedule=None, catchup=False) as dag:
    PyTorchJobOperator(
        task_id="train",
        job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 1}),
        job_name="e2e-ui",
        deferrable=True,
        log_replicas="all",
        poll_interval=0.5,
    )

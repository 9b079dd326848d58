"""The Training tab's DAG (tests/plugins/test_ui_api.py): a job submitted and left running, a task that is
not a training task, and a training task that never submits (its upstream fails)."""

from __future__ import annotations

from airflow.sdk import DAG, task

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

GATE = "training-tab-master"
ENV_SECRET = "tab-env-secret-5b7f0c"
# The master writes two lines and then runs until a test opens the gate; the worker runs until the job ends.
SCRIPT = {
    "default": {"duration": None, "logs": ["worker up"]},
    "Master": {"duration": 0, "logs": ["epoch 1 loss 0.50", "epoch 2 loss 0.40"], "gate": GATE},
}

with DAG("training_tab", schedule=None, catchup=False) as dag:
    train = PyTorchJobOperator(
        task_id="train",
        # The env value stands for a credential the tab must never show (tests/plugins/test_ui_api.py).
        job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 1}, env={"API_KEY": ENV_SECRET}),
        wait_until=None,
    )

    @task
    def report() -> str:
        return "not a training task"

    @task
    def broken() -> None:
        raise ValueError("fails on purpose, so the next task never submits")

    never = PyTorchJobOperator(
        task_id="never_submitted",
        job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1}),
        wait_until=None,
        retries=0,
    )
    report()
    broken() >> never

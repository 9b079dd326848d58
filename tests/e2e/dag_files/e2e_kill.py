"""PyTorchJobs that run until deleted (localkube, scripted), for the kill tests.

``e2e_kill_<action>``: deferrable, one DAG per ``on_kill_action``, the job named ``e2e-kill-<action>``.
``e2e_kill_<mode>_<action>``: the kill matrix (tests/e2e/test_kill_matrix.py), deferred or sync, one DAG run
per cell, the job named after the run (``kill-<run id>``, so every try of a run uses the same name).
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

SCRIPT = {"default": {"duration": None, "logs": ["step 1"]}}  # runs until its pod is deleted

DAGS = {f"e2e_kill_{action}": (f"e2e-kill-{action}", True, action) for action in ("delete", "keep")}
for mode in ("deferred", "sync"):
    for action in ("delete", "keep"):
        DAGS[f"e2e_kill_{mode}_{action}"] = ("kill-{{ run_id }}", mode == "deferred", action)

for dag_id, (job_name, deferrable, action) in DAGS.items():
    with DAG(dag_id, schedule=None, catchup=False) as dag:
        PyTorchJobOperator(
            task_id="train",
            job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1}),
            job_name=job_name,
            deferrable=deferrable,
            on_kill_action=action,
            poll_interval=0.5,
        )
    globals()[dag.dag_id] = dag

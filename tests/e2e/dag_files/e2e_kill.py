"""PyTorchJobs that run until deleted (localkube, scripted), for the kill tests.

``e2e_kill_<action>``: deferrable, one DAG per ``on_kill_action``, the job named ``e2e-kill-<action>``.
``e2e_kill_<mode>_<action>``: the kill matrix (tests/e2e/test_kill_matrix.py), deferred or sync, one DAG run
per cell, the job named after the run (``kill-<run id>``, so every try of a run uses the same name).
``e2e_kill_deferral_timeout``: deferrable with an ``execution_timeout``, for a deferral Airflow times out
itself while no triggerer runs (test_kill_matrix.py).
"""

from __future__ import annotations

from datetime import timedelta

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

with DAG("e2e_kill_deferral_timeout", schedule=None, catchup=False) as timeout_dag:
    # 45 s leaves execute() (submit, then defer) a wide margin on a loaded machine; the deferral's own
    # timeout is then the deadline's rest plus the provider's padding (at least 60 s).
    PyTorchJobOperator(
        task_id="train",
        job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1}),
        job_name="kill-{{ run_id }}",
        deferrable=True,
        execution_timeout=timedelta(seconds=45),
        poll_interval=0.5,
    )

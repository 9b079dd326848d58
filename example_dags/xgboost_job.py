"""An XGBoostJob from a YAML manifest: a Master and two Workers train on iris with XGBoost's Rabit.

The manifest lives next to the DAG (``manifests/xgboost_iris.yaml``) and is rendered as a template, so it
can use templates such as ``{{ dag_run.run_after | ds_nodash }}``: ``run_after`` is set however the run
was triggered, while ``{{ ds_nodash }}`` and the other logical-date ones are undefined in a manual run
(Airflow 3 gives it no logical date). It is validated before anything is sent to the cluster.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import XGBoostJobOperator

with DAG(
    "xgboost_job",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "xgboost"],
) as dag:
    XGBoostJobOperator(
        task_id="train",
        job="manifests/xgboost_iris.yaml",
        deferrable=True,
        log_replicas="all",
        execution_timeout=timedelta(hours=1),
    )

"""DAGs whose training functions run in PyTorchJob replicas (tests/decorators/test_run.py)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

START = datetime(2026, 1, 1)


@task
def upstream_tag() -> str:
    return "from-upstream"


@task
def upstream_time() -> datetime:
    return datetime(2026, 1, 2, 3, 4)


def whoami(tag: str, scale: float, note: str = "") -> dict:
    """Every replica logs its rank; the Master's return value is the XCom."""
    import os

    rank = int(os.environ["RANK"])
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} ran whoami", flush=True)
    return {
        "rank": rank,
        "world_size": int(os.environ["WORLD_SIZE"]),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        "tag": tag,
        "scaled": scale * 2,
        "note": note,
    }


def raises(message: str) -> None:
    """Fails in the Master only (the Worker succeeds), so the job fails for the Master's exit."""
    import os

    if os.environ["RANK"] == "0":
        raise RuntimeError(message)


def returns_a_set() -> set:
    return {1, 2}


for dag_id, deferrable in (("decorated_sync", False), ("decorated_deferrable", True)):
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        train = task.pytorch_job(
            image="python:3.11-slim",
            workers=1,
            deferrable=deferrable,
            log_replicas="all",
            on_finish_action="delete",  # the return value is read before the job is deleted
        )(whoami)
        train(upstream_tag(), 1.25, note="run {{ run_id }}")
    globals()[dag_id] = dag

with DAG("decorated_raises", schedule=None, start_date=START, catchup=False) as decorated_raises:
    task.pytorch_job(image="python:3.11-slim", workers=1, retries=0)(raises)("no shard for this rank")

with DAG("decorated_bad_return", schedule=None, start_date=START, catchup=False) as decorated_bad_return:
    task.pytorch_job(image="python:3.11-slim", workers=0, retries=0)(returns_a_set)()

with DAG("decorated_bad_argument", schedule=None, start_date=START, catchup=False) as decorated_bad_argument:
    task.pytorch_job(image="python:3.11-slim", workers=1, retries=0)(whoami)(upstream_time(), 1.0)

with DAG("decorated_mapped", schedule=None, start_date=START, catchup=False) as decorated_mapped:
    # One PyTorchJob per mapped scale (each its own name, from the map index), the Master alone.
    task.pytorch_job(image="python:3.11-slim", workers=0)(whoami).partial(tag="mapped").expand(scale=[1, 3])

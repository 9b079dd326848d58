"""TaskFlow decorators that run a function of the DAG file in every replica of a training job:
``@task.pytorch_job`` (:mod:`.pytorch_job`) and ``@task.train_job`` (:mod:`.train_job`), registered as the
provider's ``task-decorators``; :mod:`.shipping` says what can be shipped. Cheap to import (no clients)."""

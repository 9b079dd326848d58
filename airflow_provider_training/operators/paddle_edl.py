"""The PaddlePaddle EDL ``TrainingJob`` operator (``paddlepaddle.org/v1``); only fixes the kind.

Not Kubeflow's ``PaddleJob`` (:class:`~airflow_provider_training.operators.PaddleJobOperator`).
"""

from __future__ import annotations

from airflow_provider_training.operators.training import TrainingJobOperator

PADDLE_EDL = "paddlepaddle.org/v1"


class PaddleEDLTrainingJobOperator(TrainingJobOperator):
    """Submit a PaddlePaddle EDL TrainingJob and wait for it (see :class:`TrainingJobOperator`).

    Its state is read from the trainer Job and pods the EDL controller creates; deleting it (on kill,
    timeout or ``on_finish_action``) also deletes those children, which that controller never removes.
    """

    job_kind, job_api_version = "TrainingJob", PADDLE_EDL

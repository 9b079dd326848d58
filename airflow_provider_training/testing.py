"""Helpers for testing DAGs on localkube, the project's test cluster (the ``localkube`` distribution, which
the ``test`` extra installs and whose pytest fixtures load themselves; docs/testing.md).

Nothing here imports localkube: a manifest for its scripted runtime is an ordinary job manifest with its
image and its script annotation, two names fixed by localkube's runtime (docs/localkube-runtimes.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

SCRIPTED_IMAGE = "localkube/scripted:latest"
SCRIPT_ANNOTATION = "localkube.dev/script"


def scripted_job(
    kind: str,
    script: Mapping[str, Any],
    replicas: Mapping[str, int],
    *,
    command: Sequence[str] = ("python", "train.py"),
    **options: Any,
) -> dict[str, Any]:
    """A ``kind`` job manifest whose pods follow ``script`` on localkube's scripted runtime (its image and
    ``localkube.dev/script`` annotation); ``options`` go to ``build_job``."""
    from airflow_provider_training.specs import build_job

    annotations = {SCRIPT_ANNOTATION: json.dumps(script), **options.pop("annotations", {})}
    return build_job(kind, SCRIPTED_IMAGE, list(command), dict(replicas), annotations=annotations, **options)

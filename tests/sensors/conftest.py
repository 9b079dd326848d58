from __future__ import annotations

from tests.operators.harness import cluster

__all__ = ["cluster"]

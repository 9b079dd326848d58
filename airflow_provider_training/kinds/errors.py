"""The one error a bad job spec raises, before anything is sent: a field that the API or the training operator
would refuse, the kind or apiVersion among them (the registry's). Free of pydantic so callers can import it;
:mod:`airflow_provider_training.specs` re-exports it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

FieldErrors = list[tuple[str, str]]
"""(field path, what was expected), e.g. ``("spec.pytorchReplicaSpecs.Master.replicas", "must be 1")``."""


class SpecError(ValueError):
    """A job spec that the API or the training operator would refuse.

    ``errors`` holds every (field path, expectation) pair found; the message lists them all.
    """

    def __init__(self, errors: Iterable[tuple[str, str]], *, kind: str | None = None) -> None:
        self.errors: FieldErrors = list(errors)
        self.kind = kind
        super().__init__(self._message())

    def _message(self) -> str:
        header = f"{self.kind} spec is invalid" if self.kind else "job spec is invalid"
        lines = [f"{path}: {text}" if path else text for path, text in self.errors]
        if len(lines) == 1:
            return f"{header}: {lines[0]}"
        return f"{header} ({len(lines)} errors):\n" + "\n".join(f"  - {line}" for line in lines)

    def __reduce__(
        self,
    ) -> tuple[Callable[[FieldErrors, str | None], SpecError], tuple[FieldErrors, str | None]]:
        return (_rebuild, (self.errors, self.kind))


def _rebuild(errors: FieldErrors, kind: str | None) -> SpecError:
    """Unpickle a SpecError (its constructor takes the error list, not the message)."""
    return SpecError(errors, kind=kind)

"""A replica's restarts counted across the pods its operator replaces, for the wait's ``max_restarts``."""

from __future__ import annotations

from typing import NamedTuple

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.kinds.base import JobKind, RawObject


class _Seen(NamedTuple):
    """One replica pod's restarts as last seen: its uid, those of the earlier pods of its name (replaced by
    the operator), its own, and the exit code its latest run failed with (``None``: not failed)."""

    uid: str | None
    earlier: int
    own: int
    exit_code: int | None


class RestartCounter:
    """Counts the restarts of each replica of one job: its containers' ``restartCount``, plus, when the
    operator replaced the pod under the same name, the earlier pod's, and one for the replacement of a failed
    one."""

    def __init__(self, kind: JobKind, limit: int) -> None:
        self.kind, self.limit = kind, limit
        self._seen: dict[str, _Seen] = {}  # by pod name

    def count(self, pod: RawObject) -> str | None:
        """Take in a pod's latest state; the failure message once a replica whose latest run failed
        restarted more than ``limit`` times (its job may never fail by itself: no ``backoffLimit``, or
        restarts it does not count), else ``None``."""
        name, uid = diag.pod_name(pod), (pod.get("metadata") or {}).get("uid")
        own, container, exit_code = diag.restarts(pod)
        known = self._seen.get(name)
        earlier = 0 if known is None else known.earlier
        if known is not None and known.uid != uid:
            earlier += known.own + (known.exit_code is not None)
            if not own and exit_code is None:
                exit_code = known.exit_code  # not ended yet: the replica's latest run is the earlier pod's
        if known is None and not own and exit_code is None:
            return None
        self._seen[name] = _Seen(uid, earlier, own, exit_code)
        if exit_code is None or earlier + own <= self.limit:
            return None
        replica = self.kind.replica_of_pod(pod)
        where = replica.replica_type if replica.index is None else f"{replica.replica_type} {replica.index}"
        container = container or self.kind.default_container
        return (
            f"replica {where} (pod {name}, container {container}) keeps failing: restarted {earlier + own} "
            f"times, more than max_restarts={self.limit}; its last exit code was {exit_code}. The job itself "
            "has not failed"
        )

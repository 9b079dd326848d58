"""What the watch hub's cache holds per waiting PyTorchJob (the job and its two pods), in Python memory.

    .venv/bin/python benchmarks/hub_cache.py                  # the provider as installed
    git archive <rev> airflow_provider_training | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/hub_cache.py   # the provider of another revision

A localkube (the Kubeflow controller, the scripted runtime of ``scale.py``) runs one job until its Master and
Worker pods run; their JSON, renamed for each of ``--jobs`` jobs (names and uids differ, as on a cluster), is
decoded the two ways the hub receives objects, each object then kept as the hub keeps it (its ``trim``):
all in one LIST answer (the JSON decoder shares the keys of one document) and one watch event per object
(each decoded afresh). Reported: tracemalloc's traced memory still held per job, after a collection, and the
CPU time (``time.process_time``) to decode and trim one watch event's object. Since the hub keeps its objects
packed (``slim.Packed``), "as kept" is the packed record, and the CPU of packing one and of unpacking it for a
reader is reported too.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_cluster import JOB_LABEL, job_type, start_cluster
from scale_manifest import job_manifest
from trigger_load import NAMESPACE

from airflow_provider_training.kinds.base import PODS, ResourceRef
from airflow_provider_training.kinds.registry import get_kind

Trim = Callable[[dict[str, Any], ResourceRef], Any]  # the kept object: trimmed dicts, or packed


def hub_trim() -> Trim:
    """What the hub keeps of an object in this revision: ``watch._trim`` before ``slim.py`` existed, else
    ``slim.trim``, packed (``slim.Packed``) where the revision packs."""
    from airflow_provider_training import slim, watch

    old: Trim | None = getattr(watch, "_trim", None)
    if old is not None:
        return old
    packed = getattr(slim, "Packed", None)
    if packed is None:
        return slim.trim
    return lambda obj, resource: packed(slim.trim(obj, resource))


def sample_objects() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One PyTorchJob and its pods as localkube serves them once both pods run."""
    cluster, _ = start_cluster(log_every=5.0)
    try:
        cluster.call(lambda: cluster.store.create(job_type(cluster), NAMESPACE, job_manifest("sample")))
        pods_type = cluster.call(lambda: cluster.store.resource_type("", "v1", "pods"))

        def read() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            job = cluster.store.get(job_type(cluster), NAMESPACE, "sample")
            pods = [
                p for p in cluster.store.list(pods_type, NAMESPACE) if p["metadata"]["labels"].get(JOB_LABEL)
            ]
            return job, pods

        for _ in range(300):  # a gate on the pods' phase, polled; no timing is measured here
            job, pods = cluster.call(read)
            if len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods):
                return job, pods
            time.sleep(0.1)
        raise RuntimeError("the sample job's pods did not run")
    finally:
        cluster.stop_thread()


def copies(obj: dict[str, Any], jobs: int, uids: list[str]) -> list[str]:
    """``obj``'s JSON once per job, its job name and uids made unique."""
    text = json.dumps(obj)
    out = []
    for i in range(jobs):
        one = text.replace('"sample', f'"job-{i:05d}').replace("sample-", f"job-{i:05d}-")
        for n, uid in enumerate(uids):
            one = one.replace(uid, f"{uid[:23]}{n:02d}{i:010d}")
        out.append(one)
    return out


def held(texts: list[str], resource: ResourceRef, trim: Trim, *, per_event: bool) -> int:
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    if per_event:
        kept = [trim(json.loads(text), resource) for text in texts]
    else:
        listed = json.loads('{"items": [' + ",".join(texts) + "]}")
        kept = [trim(item, resource) for item in listed["items"]]
        del listed
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    del kept
    return size


def cpu_per_event(texts: list[str], resource: ResourceRef, trim: Trim, rounds: int = 5) -> list[float]:
    """Microseconds of CPU to decode and trim one watch event's object, per round (the median is printed)."""
    per = []
    for _ in range(rounds):
        start = time.process_time()
        for text in texts:
            trim(json.loads(text), resource)
        per.append((time.process_time() - start) / len(texts) * 1e6)
    return per


def cpu_per_call(calls: list[Callable[[], Any]], rounds: int = 5) -> list[float]:
    """Microseconds of CPU per call, per round."""
    per = []
    for _ in range(rounds):
        start = time.process_time()
        for call in calls:
            call()
        per.append((time.process_time() - start) / len(calls) * 1e6)
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    import airflow_provider_training

    trim = hub_trim()
    job, pods = sample_objects()
    uids = [job["metadata"]["uid"], *(p["metadata"]["uid"] for p in pods)]
    jobs = copies(job, args.jobs, uids)
    pod_texts = [text for pod in pods for text in copies(pod, args.jobs, uids)]
    resource = get_kind("PyTorchJob").resource
    where = Path(airflow_provider_training.__file__).parent
    print(f"provider: {where}; trim: {trim.__module__}.{trim.__name__}")
    print(f"JSON per job: job {len(jobs[0])} B, pods {sum(len(json.dumps(p)) for p in pods)} B")
    for per_event in (False, True):
        job_size = held(jobs, resource, trim, per_event=per_event)
        pod_size = held(pod_texts, PODS, trim, per_event=per_event)
        how = "one watch event per object" if per_event else "one LIST answer"
        print(
            f"  {how:<28} job {job_size / args.jobs / 1024:5.1f}  pods {pod_size / args.jobs / 1024:5.1f}"
            f"  total {(job_size + pod_size) / args.jobs / 1024:5.1f} KiB per job (n={args.jobs})"
        )
    for label, texts, res in (("job", jobs, resource), ("pod", pod_texts, PODS)):
        runs = cpu_per_event(texts, res, trim)
        print(
            f"  CPU to decode and keep one watch event's {label}: {statistics.median(runs):.0f} us "
            f"({min(runs):.0f}-{max(runs):.0f}, n={len(runs)} rounds of {len(texts)})"
        )
        kept = [trim(json.loads(text), res) for text in texts]
        if hasattr(kept[0], "unpack"):
            runs = cpu_per_call([obj.unpack for obj in kept])
            print(
                f"  CPU to unpack one kept {label} for a reader: {statistics.median(runs):.1f} us "
                f"({min(runs):.1f}-{max(runs):.1f}, n={len(runs)} rounds of {len(kept)})"
            )


if __name__ == "__main__":
    main()

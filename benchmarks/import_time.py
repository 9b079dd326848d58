"""How much importing our operators and sensors adds to a DAG file's parse time.

Every DAG file pays for ``import airflow.sdk``; what a provider adds is the time of its own imports *after*
that. Each fresh interpreter times both steps itself (interpreter start-up is left out): first
``import airflow.sdk``, then the import under test. Differences of two ~3 s totals drown in noise on a busy
machine; the second step timed in the same process does not. cncf.kubernetes' SparkKubernetesOperator is the
comparison point (it imports the Kubernetes client at module import).

    python benchmarks/import_time.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

BASE = "import airflow.sdk"
CASES = {
    "our operators and sensors": (
        "import airflow_provider_training.operators, airflow_provider_training.sensors"
    ),
    "SparkKubernetesOperator": (
        "from airflow.providers.cncf.kubernetes.operators.spark_kubernetes import SparkKubernetesOperator"
    ),
}

PROBE = (
    "import time\n_t0 = time.perf_counter()\n{base}\n_t1 = time.perf_counter()\n{code}\n"
    "print(_t1 - _t0, time.perf_counter() - _t1)"
)


def import_seconds(code: str) -> tuple[float, float]:
    """Seconds one fresh interpreter spends on ``import airflow.sdk``, then on ``code``."""
    probe = PROBE.format(base=BASE, code=code)
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True)
    base, added = out.stdout.split()[-2:]
    return float(base), float(added)


def measure(repeat: int) -> dict[str, list[tuple[float, float]]]:
    """Timings per case, the cases interleaved round by round so that load drift hits them alike (one
    warm-up round first, for the OS file cache)."""
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    for round_ in range(repeat + 1):
        for name, code in CASES.items():
            seconds = import_seconds(code)
            if round_:
                timings[name].append(seconds)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    timings = measure(args.repeat)
    print(
        f"{'after import airflow.sdk, import':<34} {'sdk median ms':>14} {'added median ms':>16} "
        f"{'added p90 ms':>13}   (n={args.repeat})"
    )
    for name, values in timings.items():
        base = statistics.median(v[0] for v in values) * 1000
        added = sorted(v[1] * 1000 for v in values)
        p90 = added[min(len(added) - 1, int(0.9 * len(added)))]
        print(f"{name:<34} {base:>14.0f} {statistics.median(added):>+16.0f} {p90:>+13.0f}")


if __name__ == "__main__":
    main()

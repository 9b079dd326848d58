"""How much importing our operators and sensors adds to a DAG file's parse time.

Each figure is the median time a fresh interpreter spends in the import statements (timed inside it, so
interpreter start-up is left out). ``airflow.sdk`` alone is the floor every DAG file pays; cncf.kubernetes'
SparkKubernetesOperator is the comparison point (it imports the Kubernetes client at module import).

    python benchmarks/import_time.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CASES = {
    "airflow.sdk alone": "import airflow.sdk",
    "airflow.sdk + our operators and sensors": (
        "import airflow.sdk, airflow_provider_training.operators, airflow_provider_training.sensors"
    ),
    "airflow.sdk + SparkKubernetesOperator": (
        "import airflow.sdk\n"
        "from airflow.providers.cncf.kubernetes.operators.spark_kubernetes import SparkKubernetesOperator"
    ),
}


PROBE = "import time\n_t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"


def import_seconds(code: str) -> float:
    """Seconds one fresh interpreter spends running ``code``."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], check=True, capture_output=True)
    return float(out.stdout.split()[-1])


def measure(repeat: int) -> dict[str, list[float]]:
    """Timings per case, the cases interleaved round by round so that load drift hits them alike (one
    warm-up round first, for the OS file cache)."""
    timings: dict[str, list[float]] = {name: [] for name in CASES}
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
    medians = {name: statistics.median(values) for name, values in timings.items()}
    base = medians["airflow.sdk alone"]
    print(f"{'import':<42} {'median ms':>10} {'added ms':>10} {'min ms':>8}   (n={args.repeat})")
    for name, value in medians.items():
        added = (value - base) * 1000
        print(f"{name:<42} {value * 1000:>10.0f} {added:>+10.0f} {min(timings[name]) * 1000:>8.0f}")


if __name__ == "__main__":
    main()

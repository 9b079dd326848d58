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


def measure(code: str, repeat: int) -> list[float]:
    """Seconds spent importing, per fresh interpreter (after one warm-up run for the OS file cache)."""
    timings = []
    for i in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], check=True, capture_output=True)
        if i:
            timings.append(float(out.stdout.split()[-1]))
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    medians = {name: statistics.median(measure(code, args.repeat)) for name, code in CASES.items()}
    base = medians["airflow.sdk alone"]
    print(f"{'import':<42} {'median ms':>10} {'added ms':>10}   (n={args.repeat})")
    for name, value in medians.items():
        print(f"{name:<42} {value * 1000:>10.0f} {(value - base) * 1000:>+10.0f}")


if __name__ == "__main__":
    main()

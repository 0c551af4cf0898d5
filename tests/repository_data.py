"""The measurements in the repository that the tests read (`benchmarks/data/`), named once."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
# Specs of eight networks at levels 0, 30, 60 and 90, their memory and latency logs on an H200.
H200 = DATA / "h200"
# Specs of the CPU zoo's twenty networks at levels 0, 45 and 90, their memory and latency logs on
# this repository's CPU (`examples/cpu_zoo.ini`).
ZOO = DATA / "cpu_zoo"

"""How long `make test` takes to make its old Python + PyTorch stacks from nothing.

Makes every checked stack (perf4sight.networks.CHECKED_STACKS) side by side, as the test
fixtures do, in a fresh folder with an empty pip cache, and prints the seconds each took
from the start. Downloads included: run it where `make test` runs (CI).

    python benchmarks/old_stacks.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import old_stacks  # noqa: E402

from perf4sight.networks import CHECKED_STACKS  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        old_stacks.STACKS_DIR = Path(folder) / "stacks"
        os.environ["PIP_CACHE_DIR"] = str(Path(folder) / "pip-cache")  # nothing downloaded before
        start = time.monotonic()

        def make(stack: tuple[str, str]) -> str:
            made = old_stacks.provide_stack(*stack)
            return f"{made.name}: {time.monotonic() - start:.1f} s"

        with ThreadPoolExecutor(len(CHECKED_STACKS)) as pool:
            for line in pool.map(make, CHECKED_STACKS):
                print(line, flush=True)
        print(f"all {len(CHECKED_STACKS)} stacks: {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()

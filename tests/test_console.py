"""Tables written where no terminal reads them (a pipe, a log file, CI)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# A plan's table: nine columns of figures and a note naming the layers a prediction extrapolates for.
_SCRIPT = """
from perf4sight import console
console.print_table("plan", ["level", "level reached", "params", "batch size", "recipe", "memory (MiB)",
                             "memory bound (MiB)", "latency (ms)", "images/s", "note"],
                    [[90, 90.08, 309175, 239, "sgd, fp32, train all", 255.54, 295.35, 1371.62, 174.25,
                      "extrapolated (conv_depthwise)"]])
"""


def _printed(columns: str | None) -> str:
    # nothing that tells rich to act as a terminal or how wide one is, but COLUMNS as given
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    if columns is not None:
        env["COLUMNS"] = columns
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True)
    return run.stdout


def test_a_piped_table_keeps_every_note_whole():
    printed = _printed(None)
    assert "extrapolated (conv_depthwise)" in printed and "…" not in printed


@pytest.mark.parametrize("columns", ["80", "300"])
def test_a_piped_table_is_as_wide_as_columns_says(columns):
    widths = [len(line) for line in _printed(columns).splitlines()]
    assert max(widths) <= int(columns)
    assert (max(widths) < 100) == (columns == "80")  # narrowed to fit, or as wide as it needs

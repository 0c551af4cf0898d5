"""Tables written where no terminal reads them (a pipe, a log file, CI)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perf4sight import console

# A plan's table: nine columns of figures and a note naming the layers a prediction extrapolates for.
_SCRIPT = """
from perf4sight import console
console.print_table("plan", ["level", "level reached", "params", "batch size", "recipe", "memory (MiB)",
                             "memory bound (MiB)", "latency (ms)", "images/s", "note"],
                    [[90, 90.08, 309175, 239, "sgd, fp32, train all", 255.54, 295.35, 1371.62, 174.25,
                      "extrapolated (conv_depthwise)"]])
"""


@pytest.mark.parametrize("columns", [None, "80"])
def test_a_piped_table_keeps_every_note_whole(columns):
    """Whatever COLUMNS says where no terminal is (pytest-xdist's workers have 80)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    if columns is not None:
        env["COLUMNS"] = columns
    printed = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env,
                             check=True).stdout
    assert "extrapolated (conv_depthwise)" in printed and "sgd, fp32, train all" in printed
    assert "…" not in printed


def test_the_warnings_of_a_block_are_collected_once_each_even_those_shown_before(capsys) -> None:
    console.warn("shown before")
    with console.collected_warnings() as outer:
        console.warn("first")
        with console.collected_warnings() as inner:
            console.warn("shown before")
            console.warn("first")
        console.warn("first")
    console.warn("after")
    assert outer == ["first", "shown before"] and inner == ["shown before", "first"]
    assert capsys.readouterr().err.count("warning:") == 3  # each shown once, whatever collects it

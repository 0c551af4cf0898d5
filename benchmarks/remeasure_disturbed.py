"""Forget the latency tests of a log folder that other processes disturbed, so that running
the campaign again re-measures them.

A latency test during which other processes took `BUSY_ELSEWHERE_WARNING` (20 %) or more of
the host's CPU (its `cpu_elsewhere`, which the campaign warns about) measured the machine's
load as much as the network. On a shared machine this removes those rows from each latency
journal (`<log_dir>/latency/<model>.csv`, written whole) and rewrites its `-gt.csv`; a
campaign run again on the folder then profiles exactly them, as it resumes any campaign.
It holds the folder's lock, so it refuses a folder a campaign is writing.

    .venv/bin/python benchmarks/remeasure_disturbed.py out/recipes_subset/logs
    sh benchmarks/profile_recipe_subset.sh     # re-measures the forgotten tests
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perf4sight.device.contention import BUSY_ELSEWHERE_WARNING
from perf4sight.device.definitions import LATENCY
from perf4sight.device.errors import Perf4sightError
from perf4sight.device.files import write_text
from perf4sight.device.lock import LogFolderLock
from perf4sight.device.logs import GT_SUFFIX, SEPARATOR, parse_field, write_gt


def forget_disturbed(journal: Path, threshold: float = BUSY_ELSEWHERE_WARNING) -> int:
    """Remove the journal's rows whose `cpu_elsewhere` is `threshold` or more, rewrite its
    `-gt.csv`, and return how many were removed."""
    header, *lines = journal.read_text(encoding="utf-8").splitlines()
    column = header.split(SEPARATOR).index("cpu_elsewhere")
    kept = []
    for number, line in enumerate(lines, start=2):
        share = parse_field("cpu_elsewhere", line.split(SEPARATOR)[column], where=f"{journal}:{number}")
        if share is None or float(share) < threshold:
            kept.append(line)
    if len(kept) < len(lines):
        write_text(journal, "\n".join([header, *kept]) + "\n")
        write_gt(journal, LATENCY.kind)
    return len(lines) - len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dir", type=Path, help="the campaign's log folder (holding latency/)")
    args = parser.parse_args(argv)
    journals = sorted(path for path in (args.log_dir / LATENCY.kind).glob("*.csv") if not path.name.endswith(GT_SUFFIX))
    try:
        with LogFolderLock(args.log_dir):
            removed = {journal.stem: forget_disturbed(journal) for journal in journals}
    except Perf4sightError as exc:  # a campaign holds the folder, or a journal is damaged
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{sum(removed.values())} latency tests with cpu_elsewhere >= {BUSY_ELSEWHERE_WARNING} forgotten in "
          f"{sum(1 for count in removed.values() if count)} of {len(journals)} journals under {args.log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

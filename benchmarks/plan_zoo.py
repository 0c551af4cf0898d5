"""A campaign planned for a time budget of this machine's CPU against the whole CPU zoo, each
family left out.

    .venv/bin/python benchmarks/plan_zoo.py [--minutes 15]

The zoo's [profile] (`examples/cpu_zoo.ini`: twenty networks at three levels and three batch
sizes, both variables) is planned for the budget as `perf4sight profile plan` plans it: each
network's least pruned model timed here, each test's seconds estimated, a spread of tests kept
within the budget (`perf4sight.profile.plan`, `selection.spread_tests`). The zoo's logged runs
of the planned tests are then the campaign's, and every method is fitted on them with each
family left out (as `zoo_accuracy.py`, `default` choosing per split) and evaluated on all of
that family's runs, beside the same fitted on every run. Prints the estimate of the whole zoo
campaign (its real wall time is in BENCHMARKS.md), what the plan picked, and MAPE % per family
and its mean for both.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.config import load_section
from perf4sight.device.definitions import QUANTITIES
from perf4sight.device.logs import architecture_name
from perf4sight.fit import DEFAULT_METHOD, ArchitectureCatalog, mape_pct, read_logs
from perf4sight.fit.logs import device_fresh_pages
from perf4sight.profile.plan import time_tests
from perf4sight.profile.selection import spread_tests
from perf4sight.profile.test_config import network_models
from tx2_accuracy import fit_chosen, method_datasets, model_levels, profiled
from zoo_accuracy import FAMILIES, ZOO_DIR

CONFIG = ZOO_DIR.parents[2] / "examples" / "cpu_zoo.ini"


def planned_tests(minutes: float) -> tuple[pd.DataFrame, np.ndarray, float, float]:
    """The zoo's candidate tests (model, batch size) with their estimated seconds, the positions
    of those planned for `minutes`, the campaign's start, and the seconds the timing took."""
    settings = load_section(CONFIG, "profile")
    start = time.perf_counter()
    files = network_models(settings, settings.local_model_loc)
    rows = [(network, architecture_name(str(path)), str(path), bs) for network, paths in files.items()
            for path in paths for bs in settings.bs]
    tests = pd.DataFrame(rows, columns=["net", "model", "local", "bs"])
    tests["level"] = model_levels(tests["model"])
    tests["seconds"], worker_s = time_tests(settings, tests, files)
    timing_s = time.perf_counter() - start
    return tests, spread_tests(tests, seconds=60.0 * minutes - worker_s), worker_s, timing_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="the campaign's time budget (default 15)")
    args = parser.parse_args(argv)
    console.set_quiet(True)
    tests, chosen, worker_s, timing_s = planned_tests(args.minutes)
    picked = tests.iloc[chosen]
    print(f"timing the {tests['net'].nunique()} networks took {timing_s:.0f} s; the whole zoo campaign "
          f"({len(tests)} tests of (model, batch size), each for memory and latency) is estimated at "
          f"{(tests['seconds'].sum() + worker_s) / 60:.1f} min")
    print(f"planned for {args.minutes:g} min: {len(picked)} tests, estimated {(picked['seconds'].sum() + worker_s) / 60:.1f}"
          f" min; per batch size {picked['bs'].value_counts().sort_index().to_dict()}, per level "
          f"{picked['level'].value_counts().sort_index().to_dict()}")
    nets, levels = profiled(ZOO_DIR)
    catalog = ArchitectureCatalog(ZOO_DIR / "models")
    planned = set(zip(picked["model"], picked["bs"]))
    table: dict[tuple[str, str], float] = {}
    for target in QUANTITIES:
        logs = read_logs(nets, levels, [ZOO_DIR / target.kind], [target])
        sets = method_datasets(DEFAULT_METHOD, logs, target.name, catalog, "training",
                               fresh_pages_ms_per_mib=device_fresh_pages([ZOO_DIR / target.kind]))
        rows = next(iter(sets.values())).rows
        in_plan = np.array([(model, bs) in planned for model, bs in zip(rows["model"], rows["batch_size"])])
        for family, members in FAMILIES.items():
            held = rows["net"].isin(members).to_numpy()
            for label, train in (("all runs", ~held), (f"{args.minutes:g} min plan", ~held & in_plan)):
                chosen_method, _, model = fit_chosen(DEFAULT_METHOD, {None: {m: d.select(train) for m, d in sets.items()}},
                                                     target.name)
                evaluated = sets[chosen_method].select(held)
                table[(family, f"{target.name}, {label}")] = mape_pct(evaluated.target, model.predict(evaluated.rows))
    frame = pd.Series(table).unstack().round(2)
    frame.loc["mean over families"] = frame.mean().round(2)
    print(frame.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())

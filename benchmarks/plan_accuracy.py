"""A small campaign against all of it: TX2 accuracy on a network left out when the others'
tests are a spread of at most N (`perf4sight.profile.selection.spread_tests`).

For each of the four TX2 networks, every method is fitted on the other three networks' runs
(`default` chooses per split, as fingerprinting does) twice: on all the tests their logs hold,
and on the N tests per variable (memory, latency) that `spread_tests` picks from those tests
(a picked test that ran out of memory gives no training row, as on the device); both are
evaluated on every run of the network left out. MAPE %.

    .venv/bin/python benchmarks/plan_accuracy.py [--budget 50 --budget 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES
from perf4sight.device.logs import architecture_name
from perf4sight.fit import DEFAULT_METHOD, ArchitectureCatalog, mape_pct, read_logs
from perf4sight.profile.selection import spread_tests
from tx2_accuracy import (PROTOCOL_TRAIN_LEVELS, TX2_DIR, TX2_NETS, as_profiled, find_data, fit_chosen,
                          method_datasets, model_levels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, action="append", help="tests per variable (repeatable; default 50, 100)")
    args = parser.parse_args(argv)
    if not (TX2_DIR / MEMORY.kind).is_dir():
        print(f"no logs at {TX2_DIR / MEMORY.kind}; nothing to benchmark")
        return 0
    console.set_quiet(True)
    models = as_profiled(TX2_DIR / "models", Path(tempfile.mkdtemp(prefix="tx2_models_")))
    data = find_data(TX2_DIR, models, PROTOCOL_TRAIN_LEVELS, TX2_NETS, (), "1.8")
    catalog = ArchitectureCatalog(data.models)
    budgets = args.budget or [50, 100]
    table: dict[tuple[str, str], dict[str, float]] = {}
    for target in QUANTITIES:
        logs = read_logs(data.nets, data.levels, [data.logs / target.kind], [target])
        tests = pd.DataFrame({"net": logs["net"], "model": logs["model"].map(architecture_name), "bs": logs["bs"]})
        tests = tests.drop_duplicates(["model", "bs"]).reset_index(drop=True)
        sets = method_datasets(DEFAULT_METHOD, logs, target.name, catalog, "training", torch_version=data.torch_version)
        rows = next(iter(sets.values())).rows
        run = list(zip(rows["model"], rows["batch_size"]))
        for net in data.nets:
            held = (rows["net"] == net).to_numpy()
            others = tests[tests["net"] != net].reset_index(drop=True)
            candidates = others.assign(level=model_levels(others["model"]))
            for budget in [None, *budgets]:
                if budget is None:
                    train, label = ~held, "all"
                else:
                    chosen_tests = others.iloc[spread_tests(candidates, budget)]
                    picked = set(zip(chosen_tests["model"], chosen_tests["bs"]))
                    train, label = np.array([key in picked for key in run]) & ~held, f"{budget} tests"
                chosen, _, model = fit_chosen(DEFAULT_METHOD, {data.torch_version: {m: d.select(train)
                                                                                    for m, d in sets.items()}},
                                              target.name)
                evaluated = sets[chosen].select(held)
                entry = table.setdefault((net, label), {})
                entry[target.name] = mape_pct(evaluated.target, model.predict(evaluated.rows))
                entry[f"{target.name} runs"] = int(train.sum())
    frame = pd.DataFrame(table).T.round(2)
    print(frame.to_string())
    means = frame.groupby(level=1)[[MEMORY.name, LATENCY.name]].mean().round(2)
    print("\nmean over the networks left out:\n" + means.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())

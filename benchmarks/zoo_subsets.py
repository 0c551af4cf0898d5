"""Which networks a small fingerprint should profile: fit on a few of the CPU zoo's networks, predict the rest.

Each `--subset` (comma-separated zoo networks) is fitted with `default` as fingerprinting fits it
(every level and batch size of those networks, the choice made on them alone) and evaluated on
every zoo network that no subset holds, so that the subsets are judged on the same networks; MAPE
% per evaluated network and the mean, memory and latency. The truth is the zoo's (eleven latency
campaigns merged), so the comparison carries no campaign's drift. The demo's networks before and
after it took three more:

    .venv/bin/python benchmarks/zoo_subsets.py --subset resnet18,mobilenet_v2,squeezenet1_0 \
        --subset resnet18,mobilenet_v2,squeezenet1_0,alexnet,mobilenet_v3_small,regnet_x_400mf
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from perf4sight import console
from perf4sight.device.definitions import LATENCY, MEMORY, QUANTITIES
from perf4sight.fit import DEFAULT_METHOD, ArchitectureCatalog, mape_pct, read_logs
from perf4sight.fit.logs import device_fresh_pages
from tx2_accuracy import fit_chosen, method_datasets, profiled
from zoo_accuracy import ZOO_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", action="append", required=True, help="zoo networks, comma-separated (repeatable)")
    args = parser.parse_args(argv)
    console.set_quiet(True)
    nets, levels = profiled(ZOO_DIR)
    if not nets:
        print(f"no logs under {ZOO_DIR / MEMORY.kind}; nothing to benchmark")
        return 0
    subsets = [tuple(s.split(",")) for s in args.subset]
    unknown = sorted({n for s in subsets for n in s} - set(nets))
    if unknown:
        parser.error(f"--subset: not networks of the zoo: {', '.join(unknown)} (the zoo's: {', '.join(nets)})")
    evaluated_nets = [n for n in nets if not any(n in s for s in subsets)]
    catalog = ArchitectureCatalog(ZOO_DIR / "models")
    errors: dict[tuple[str, ...], dict[str, dict[str, float]]] = {s: {} for s in subsets}
    chosen: dict[tuple[str, ...], dict[str, str]] = {s: {} for s in subsets}
    for target in QUANTITIES:
        logs = read_logs(nets, levels, [ZOO_DIR / target.kind], [target])
        sets = method_datasets(DEFAULT_METHOD, logs, target.name, catalog, "training",
                               fresh_pages_ms_per_mib=device_fresh_pages([ZOO_DIR / target.kind]))
        rows = next(iter(sets.values())).rows
        evaluated = rows["net"].isin(evaluated_nets).to_numpy()
        for subset in subsets:
            train = rows["net"].isin(subset).to_numpy()
            chosen[subset][target.name], _, model = fit_chosen(
                DEFAULT_METHOD, {None: {m: d.select(train) for m, d in sets.items()}}, target.name)
            data = sets[chosen[subset][target.name]].select(evaluated)
            predicted = model.predict(data.rows)
            for net in evaluated_nets:
                mine = (data.rows["net"] == net).to_numpy()
                errors[subset].setdefault(net, {})[target.name] = mape_pct(data.target[mine], predicted[mine])
    names = [f"subset {i + 1}" for i in range(len(subsets))]
    for name, subset in zip(names, subsets):
        print(f"{name}: {', '.join(subset)} (default chose {chosen[subset][MEMORY.name]} / {chosen[subset][LATENCY.name]})")
    table = [(net, *(errors[s][net][q.name] for s in subsets for q in (MEMORY, LATENCY))) for net in evaluated_nets]
    table.append(("mean", *(float(np.mean([errors[s][n][q.name] for n in evaluated_nets]))
                            for s in subsets for q in (MEMORY, LATENCY))))
    console.print_table(f"CPU zoo networks in no subset ({len(evaluated_nets)}), MAPE %",
                        ("network", *(f"{name} {q.name}" for name in names for q in (MEMORY, LATENCY))), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

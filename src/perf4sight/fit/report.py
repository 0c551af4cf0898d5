"""Evaluation of fitted models: MAPE overall and per network, as JSON, a table, a CSV and a plot.

A report maps each evaluated target, by its name with unit (`mem_used_mib`, `latency_ms`),
to its entry; the tables, the CSV and the plot name the targets the same way."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perf4sight import console
from perf4sight.architecture import version_name
from perf4sight.config import report_files
from perf4sight.files import replaced, write_text

__all__ = ["mape_pct", "summarise", "print_report", "write_report"]


def mape_pct(measured: Any, predicted: Any) -> float:
    """Mean absolute percentage error, in percent."""
    measured = np.asarray(measured, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    return float(np.mean(np.abs(predicted - measured) / np.abs(measured)) * 100.0)


def summarise(predictions: pd.DataFrame) -> dict[str, Any]:
    """The report entry of one target from rows with net, measured and predicted (and
    `bound` for a memory model that stores one): MAPE, and the share of rows whose
    prediction (bound) lies below the measurement, overall and per network."""
    per_net = {str(net): _errors(group) for net, group in predictions.groupby("net", sort=True)}
    return {**_errors(predictions), "per_net": per_net}


def _errors(rows: pd.DataFrame) -> dict[str, Any]:
    errors = {
        "mape_pct": mape_pct(rows["measured"], rows["predicted"]),
        "n": int(len(rows)),
        "under_pct": float(np.mean(rows["predicted"] < rows["measured"]) * 100.0),
    }
    if "bound" in rows:
        errors["bound_under_pct"] = float(np.mean(rows["bound"] < rows["measured"]) * 100.0)
    return errors


# Above this many evaluated tests, measured and predicted are shown per architecture.
_MAX_ROWS_SHOWN = 60


def print_report(report: Mapping[str, Any], predictions: Mapping[str, pd.DataFrame]) -> None:
    """Measured against predicted, then the MAPE per network and overall, per target, and
    each target's method (with why `method = default` chose it), the device's PyTorch its
    features count what autograd saves for, and what profiling its training runs cost."""
    _print_predictions(report, predictions)
    rows = []
    for target, entry in report.items():
        for net, stats in [*entry["per_net"].items(), ("all", entry)]:
            rows.append((target, net, stats["n"], stats["mape_pct"], stats["under_pct"],
                         stats.get("bound_under_pct", "")))
    console.print_table("Fingerprint evaluation", ("target", "net", "rows", "MAPE %",
                                                   "under-estimated %", "bound under-estimated %"), rows)
    for target, entry in report.items():
        choice = entry.get("method_choice")
        if "method" in entry:
            version = entry.get("torch_version")
            console.info(f"{target} model: {entry['method']}" + (f", chosen by method = default: {choice['reason']}"
                                                                 if choice else "")
                         + (f"; what autograd saves as PyTorch {version_name(version)} saves it" if version else ""))
        if entry.get("campaign"):
            console.info(f"{target} model: fitted on {_cost(entry['campaign'])}")


def _cost(campaign: Mapping[str, Any]) -> str:
    """A campaign's cost (`campaign_cost`) in words."""
    minutes = campaign["device_minutes"]
    timed = ("device time not logged" if minutes is None else f"{minutes:.1f} device minutes"
             + (f" for the {campaign['timed']} that logged it" if campaign["timed"] < campaign["tests"] else ""))
    skipped = f", {campaign['skipped']} skipped" if campaign["skipped"] else ""
    return (f"a campaign of {campaign['tests']} tests ({campaign['out_of_memory']} out of memory, "
            f"{campaign['failed']} failed otherwise{skipped}), {timed}")


def _print_predictions(report: Mapping[str, Any], predictions: Mapping[str, pd.DataFrame]) -> None:
    keys = ["net", "model", "batch_size"]
    table = None
    for target, frame in predictions.items():
        part = frame[keys + ["measured", "predicted"]].rename(
            columns={"measured": f"{target} measured", "predicted": f"{target} predicted"}
        )
        table = part if table is None else table.merge(part, on=keys, how="outer")
    if table is None or table.empty:
        return
    table = table.sort_values(keys, ignore_index=True)
    if len(table) > _MAX_ROWS_SHOWN:  # one row per architecture: means over its batch sizes
        table = table.drop(columns="batch_size").groupby(["net", "model"], as_index=False).mean()
    table = table.drop(columns="net").rename(columns={"batch_size": "bs"})
    rows = [["" if pd.isna(v) else v for v in row] for row in table.itertuples(index=False)]
    console.print_table("Measured against predicted", list(table.columns), rows)


def write_report(report: Mapping[str, Any], predictions: Mapping[str, pd.DataFrame], path: str | Path) -> list[Path]:
    """Write the JSON report at `path` and, beside it, per-row predictions (CSV) and a
    predicted-against-measured plot (PNG); returns the paths written."""
    path, csv_path, png_path = report_files(Path(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pd.concat(
        [frame.assign(target=target) for target, frame in predictions.items()], ignore_index=True,
    )
    columns = ["target", "net", "model", "batch_size", "measured", "predicted"]
    with replaced(csv_path) as temporary:
        table[columns].to_csv(temporary, index=False)
    with replaced(png_path) as temporary:
        _plot(report, predictions, temporary)
    write_text(path, json.dumps(report, indent=2) + "\n")  # last: a report names complete files
    return [path, csv_path, png_path]


def _plot(report: Mapping[str, Any], predictions: Mapping[str, pd.DataFrame], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(predictions), figsize=(5.5 * len(predictions), 5), squeeze=False)
    for ax, (target, frame) in zip(axes[0], predictions.items()):
        for net, group in frame.groupby("net", sort=True):
            mape = report[target]["per_net"][str(net)]["mape_pct"]
            ax.scatter(group["measured"], group["predicted"], s=14, label=f"{net} ({mape:.1f} %)")
        low = float(min(frame["measured"].min(), frame["predicted"].min()))
        high = float(max(frame["measured"].max(), frame["predicted"].max()))
        ax.plot([low, high], [low, high], color="grey", linewidth=1, linestyle="--")
        ax.set_xlabel(f"measured {target}")
        ax.set_ylabel(f"predicted {target}")
        ax.set_title(f"{target}: MAPE {report[target]['mape_pct']:.2f} %")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)

"""`perf4sight prune`: the [create_network_dataset] stage from the command line."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import typer

from perf4sight import console
from perf4sight.config import NetworkDatasetSettings
from perf4sight.device.checks import parse_decimal
from perf4sight.errors import ConfigError, NetworkError, clip, in_settings
from perf4sight.networks.checks import check_level, check_settings_values

__all__ = ["register", "parse_levels", "parse_input_size"]


def parse_levels(text: str) -> list[int]:
    """'0,10,20' -> [0, 10, 20]; 'start:stop:step' -> start to stop inclusive (never empty);
    every level within [0, MAX_LEVEL], refused before any work."""
    def checked(level: int) -> int:
        try:
            check_level(level)
        except NetworkError as exc:
            raise ConfigError(f"--levels {clip(text.strip())}: {exc}") from None
        return level

    return [checked(level) for level in _levels(text.strip(), checked)]


def _levels(text: str, checked: Callable[[int], int]) -> list[int]:
    """The levels `text` lists; a range's ends are `checked` before the range is made."""
    match = re.fullmatch(r"([0-9]+):([0-9]+):([0-9]+)", text)
    if match:
        start, stop, step = (int(g) for g in match.groups())
        checked(start), checked(stop)
        if step < 1:
            raise ConfigError(f"--levels {text}: the step must be at least 1")
        if stop < start:
            raise ConfigError(
                f"--levels {text}: the range runs downward, so it holds no level; did you mean {stop}:{start}:{step}?"
            )
        return list(range(start, stop + 1, step))
    if re.fullmatch(r"[0-9]+(\s*,\s*[0-9]+)*", text):
        return [int(v) for v in text.split(",")]
    raise ConfigError(f"--levels {text!r}: expected integers like '0,10,20' or a range like '0:90:10'")


def parse_input_size(text: str) -> list[int]:
    """'3,64,64' (or '3x64x64') -> [3, 64, 64]."""
    sizes = [parse_decimal(part) for part in re.split(r"[,x]", text.strip())]
    if len(sizes) != 3 or not all(size is not None and size > 0 for size in sizes):
        raise ConfigError(f"--input-size {clip(repr(text))}: expected three positive integers like '3,224,224'")
    return sizes  # type: ignore[return-value]


def register(app: typer.Typer) -> None:
    """Add `prune` to the perf4sight app."""

    @app.command("prune")
    def prune(
        net: list[str] = typer.Option(..., "--net", "-n", help="Network: torchvision name or alias, or model file; repeat or comma-separate."),
        levels: str = typer.Option("0", "--levels", "-l", help="Pruning levels in percent of parameters removed: '0,10,20' or '0:90:10'."),
        mode: str = typer.Option("random", "--mode", help="random or l1-norm."),
        seed: int = typer.Option(0, "--seed", help="Seed of random pruning (and of l1-norm's initial weights)."),
        input_size: str = typer.Option("3,224,224", "--input-size", help="Input size C,H,W."),
        num_classes: int = typer.Option(1000, "--num-classes", help="Classifier outputs."),
        out: Path = typer.Option(Path("out/models"), "--out", "-o", help="Folder for the specs and manifest.csv."),
        model_desc_dir: Path | None = typer.Option(None, "--model-desc-dir", help="Folder of your own model files (<name>.py)."),
        write_model_files: bool = typer.Option(False, "--write-model-files", help="Also write standalone <net>_<level>.py files."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace a spec in --out that differs from the one this run makes."),
    ) -> None:
        """Prune networks at several levels; write architecture specs and a manifest."""
        settings = NetworkDatasetSettings(
            networks=[n.strip() for item in net for n in item.split(",") if n.strip()],
            pruning_perc=parse_levels(levels),
            mode=mode,
            model_desc_dir=model_desc_dir,
            model_path=out,
            seed=seed,
            input_size=parse_input_size(input_size),
            num_classes=num_classes,
            write_model_files=write_model_files,
            overwrite=overwrite,
        )
        with in_settings("[create_network_dataset]"):
            check_settings_values(settings)  # before torch loads; the stage checks the networks' names
            from perf4sight.networks import create_network_dataset

            manifest = create_network_dataset(settings)
        console.print_table(
            f"pruned networks ({out})",
            ["name", "target level", "level reached", "params", "MMACs"],
            [
                (row.name, row.target_level, float(row.level_reached), row.params, round(row.macs / 1e6, 1))
                for row in manifest.itertuples()
            ],
        )

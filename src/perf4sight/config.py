"""config.ini sections -> typed settings, in one place.

Each section of the original tool's config file is a frozen dataclass below; its fields
are the keys, their annotations say how a value is read, and their defaults make a key
optional. List values are Python literals read with `ast.literal_eval` (never `eval`);
a bare word is taken as a one-element list. Relative paths are kept relative to the
working directory, as in the original tool. Anything unknown or malformed raises
`ConfigError` naming the file, section, key and value (cut to a readable length). The
output paths a config names are checked when it is read, before any stage runs: a folder
where a file is to be written (or a file where a folder is) would otherwise fail after
hours of profiling.

The names of the workload (stages, targets, datasets) and the checks of its values are
not the config file's: they are in `perf4sight.device.definitions`.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from perf4sight.device.checks import read_ini
from perf4sight.device.definitions import TEST_VARIABLES
from perf4sight.device.recipe import DEFAULT_RECIPE
from perf4sight.errors import ArgumentError, ConfigError, clip
from perf4sight.networks.trust import model_file_folders, trust_model_folder

__all__ = [
    "NetworkDatasetSettings",
    "ProfileSettings",
    "FingerprintSettings",
    "Config",
    "SECTIONS",
    "OUTPUT_PATHS",
    "INPUT_PATHS",
    "check_output_path",
    "report_files",
    "load_config",
    "load_section",
    "parse_section",
]


@dataclass(frozen=True)
class NetworkDatasetSettings:
    """[create_network_dataset]: which networks to prune, how, and where the specs go."""

    networks: list[str]
    pruning_perc: list[int] = field(default_factory=lambda: [0])
    mode: str = "random"
    model_desc_dir: Path | None = None
    model_path: Path = Path("out/models")
    seed: int = 0
    input_size: list[int] = field(default_factory=lambda: [3, 224, 224])
    num_classes: int = 1000
    write_model_files: bool = False
    # a spec already in the folder that differs from the one this run makes is replaced only then
    overwrite: bool = False
    # The original wrote its specs to model_path/<dataset> (models/pruned/random_pruning/imagenet,
    # where its [profile] local_model_loc looks); a config that names a dataset, here or in its
    # [profile] section, gets that folder too.
    dataset: str | None = None

    @property
    def spec_dir(self) -> Path:
        """The folder the specs are written to: model_path, or model_path/<dataset>."""
        return self.model_path / self.dataset if self.dataset else self.model_path


@dataclass(frozen=True)
class ProfileSettings:
    """[profile]: making a test config (any machine) and running it (on the device)."""

    # create-config keys (the original's)
    network: list[str] = field(default_factory=list)
    dataset: str = "spec"
    bs: list[int] = field(default_factory=lambda: [2, 4, 8, 16, 32, 64, 128, 256])
    stage: list[str] = field(default_factory=lambda: ["training"])
    profile_variables: list[str] = field(default_factory=lambda: list(TEST_VARIABLES))
    local_model_loc: Path | None = None
    device_model_loc: Path | None = None
    # at most this many (model, batch size) pairs, spread over each network's levels and batch
    # sizes (`perf4sight.profile.selection`); None: every model at every batch size
    max_tests: int | None = None
    # tests that fit this many minutes of this machine (`perf4sight.profile.plan`), spread as
    # `max_tests`; and a run starts no test once its tests have held the device that long;
    # None: no time budget
    budget_minutes: float | None = None
    # the training recipes (`perf4sight.device.recipe`), one list per recipe key; the tests are
    # their product, as of the other lists. A `trainable` item `network:layer` is that
    # network's only (the first trained layer's name differs from network to network).
    optimizer: list[str] = field(default_factory=lambda: [DEFAULT_RECIPE.optimizer])
    precision: list[str] = field(default_factory=lambda: [DEFAULT_RECIPE.precision])
    trainable: list[str] = field(default_factory=lambda: [DEFAULT_RECIPE.trainable])
    checkpoint_segments: list[int] = field(default_factory=lambda: [DEFAULT_RECIPE.checkpoint_segments])
    zero_grad: list[str] = field(default_factory=lambda: [DEFAULT_RECIPE.zero_grad])
    # the original's two halves: make the test config (host), run it (device)
    create_config: bool = True
    run_profiling: bool = True
    # run keys
    device: str = "cpu"
    gpu_id: int = 0
    till_first_fail: bool = False
    retry_failed: bool = True
    log_dir: Path = Path("out/logs")
    test_config: Path = Path("out/test_config.ini")
    save: bool = True
    iterations: int = 3
    warmup: int = 1
    # the latency tests run this many times, each pass in another order of the models, and
    # merged (`perf4sight.profile.passes`): a shared machine's drift over minutes averaged out
    latency_passes: int = 1
    memory_limit_mib: int | None = None
    # a campaign over a lab's devices on Ray (`perf4sight.profile.lab`): the cluster (auto: the one
    # this machine belongs to, or the head's address; None: this machine's device alone) and the
    # Ray resources of its devices, `name` or `name:cores` (cpu_a:0-3)
    cluster: str | None = None
    devices: list[str] = field(default_factory=list)


# Where a [fingerprint] without model_storedir (the original's shipped config) stores its models.
DEFAULT_MODEL_STOREDIR = Path("out/fitted")


@dataclass(frozen=True)
class FingerprintSettings:
    """[fingerprint]: which logs train and evaluate the models, and where they are stored."""

    train_nets: list[str]
    train_logs: list[int]
    pruned_models_storedir: Path
    model_storedir: Path
    memory_logs: list[Path] = field(default_factory=list)
    latency_logs: list[Path] = field(default_factory=list)
    eval_nets: list[str] = field(default_factory=list)
    eval_logs: list[int] = field(default_factory=list)
    eval_memory_logs: list[Path] = field(default_factory=list)
    eval_latency_logs: list[Path] = field(default_factory=list)
    evaluate: bool = False
    overwrite: bool = False
    stage: str = "training"
    memory_model: bool = True
    latency_model: bool = True
    method: str = "default"
    report: Path | None = None
    # the device's PyTorch, where its logs have no environment record (the original tool's)
    torch_version: str | None = None


SECTIONS: dict[str, type] = {
    "create_network_dataset": NetworkDatasetSettings,
    "profile": ProfileSettings,
    "fingerprint": FingerprintSettings,
}
# The keys of each section that name something the toolflow writes: a folder or a file.
OUTPUT_PATHS: dict[str, dict[str, str]] = {
    "create_network_dataset": {"model_path": "folder"},
    "profile": {"log_dir": "folder", "test_config": "file"},
    "fingerprint": {"model_storedir": "folder", "report": "file"},
}
# The keys of each section that name folders whose files a run reads (specs, model files, logs),
# and the names of those files: `<net>_<level>` specs, model files and logs, environment records.
INPUT_FILE = re.compile(r".+_[0-9]+(\.json|\.py|-gt\.csv|\.csv)|environment-.*\.json")
INPUT_PATHS: dict[str, tuple[str, ...]] = {
    "create_network_dataset": ("model_desc_dir",),
    "profile": ("local_model_loc",),
    "fingerprint": ("pruned_models_storedir", "memory_logs", "latency_logs", "eval_memory_logs", "eval_latency_logs"),
}


def report_files(report: Path) -> list[Path]:
    """The files `report` names: the JSON itself, its per-row predictions (CSV) and its plot (PNG) beside it."""
    return [report, report.with_name(f"{report.stem}_predictions.csv"), report.with_suffix(".png")]


@dataclass(frozen=True)
class Config:
    """The sections present in one config file, in the order the toolflow runs them."""

    path: Path
    create_network_dataset: NetworkDatasetSettings | None = None
    profile: ProfileSettings | None = None
    fingerprint: FingerprintSettings | None = None

    def sections(self) -> list[str]:
        """Names of the sections present, in toolflow order."""
        return [name for name in SECTIONS if getattr(self, name) is not None]


def check_output_path(path: Path, kind: str, where: str) -> None:
    """Refuse an output `path` that cannot become a `kind` ('folder' or 'file'): something of
    the other kind in its place, a file where one of its parent folders would be, or a
    parent that cannot be written (ArgumentError naming `where`). Nothing is created."""
    if path.exists() and path.is_dir() != (kind == "folder"):
        other = "folder" if path.is_dir() else "file"
        raise ArgumentError(f"{where}: {clip(str(path))} is a {other}; a {kind} is written there")
    parent = path if kind == "folder" else path.parent
    for ancestor in (parent, *parent.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ArgumentError(f"{where}: {clip(str(ancestor))} is a file, not a folder to write {clip(str(path))} in")
            if not os.access(ancestor, os.W_OK | os.X_OK) and not (ancestor == path and kind == "folder"):
                raise ArgumentError(f"{where}: {clip(str(ancestor))} cannot be written to")
            return


def load_config(path: str | Path) -> Config:
    """Read a config.ini; raise ConfigError for a missing file, unknown section or bad key."""
    path = Path(path)
    parser = read_ini(path)
    unknown = [s for s in parser.sections() if s not in SECTIONS]
    if unknown:
        raise ConfigError(
            f"{path}: unknown section [{unknown[0]}]; known sections: "
            + ", ".join(f"[{s}]" for s in SECTIONS)
        )
    if not parser.sections():
        raise ConfigError(f"{path}: no sections; expected one of " + ", ".join(SECTIONS))
    raw = {name: dict(parser[name]) for name in SECTIONS if parser.has_section(name)}
    values = {name: parse_section(SECTIONS[name], raw[name], where=f"{path}: [{name}]")
              for name in ("create_network_dataset", "profile") if name in raw}
    networks, profile = values.get("create_network_dataset"), values.get("profile")
    if networks is not None and networks.dataset is None and profile is not None and profile.dataset != "spec":
        values["create_network_dataset"] = networks = dataclasses.replace(networks, dataset=profile.dataset)
    if "fingerprint" in raw:
        fingerprint = _fingerprint_folders(raw["fingerprint"], networks, where=f"{path}: [fingerprint]")
        values["fingerprint"] = parse_section(FingerprintSettings, fingerprint, where=f"{path}: [fingerprint]")
    if networks is not None:
        for folder in model_file_folders(networks.networks, networks.model_desc_dir):  # the user's own model files, named by this config
            trust_model_folder(folder)
    for name, settings in values.items():
        for key, kind in OUTPUT_PATHS[name].items():
            if getattr(settings, key) is not None:
                check_output_path(getattr(settings, key), kind, f"{path}: [{name}] {key}")
    _check_outputs_not_inputs(path, values)
    return Config(path=path, **values)


def _check_outputs_not_inputs(path: Path, values: dict[str, Any]) -> None:
    """Refuse an output file (`test_config`, `report` and what it writes beside it) that is
    one of the run's inputs: the config file itself, or a file it reads from a folder
    (`INPUT_FILE`: a spec, a model file, a log), which it would replace. ArgumentError naming both."""
    inputs = {path.resolve(): "the config file"}
    for name, settings in values.items():
        for key in INPUT_PATHS[name]:
            value = getattr(settings, key)
            for folder in value if isinstance(value, list) else [value] if value is not None else []:
                if folder.is_dir():
                    inputs.update((file.resolve(), f"read from [{name}] {key} = {folder}")
                                  for file in folder.iterdir() if INPUT_FILE.fullmatch(file.name) and file.is_file())
    for name, settings in values.items():
        for key, kind in OUTPUT_PATHS[name].items():
            output = getattr(settings, key)
            if kind != "file" or output is None:
                continue
            for file in report_files(output) if key == "report" else [output]:
                if file.resolve() in inputs:
                    raise ArgumentError(f"{path}: [{name}] {key}: {clip(str(file), 300)} would be written over an "
                                        f"input of this run, {file.resolve()} ({inputs[file.resolve()]})")


def _fingerprint_folders(raw: dict[str, str], networks: NetworkDatasetSettings | None, *, where: str) -> dict[str, str]:
    """[fingerprint] with the folders the original's shipped config leaves out: the specs of the
    same config's [create_network_dataset] and DEFAULT_MODEL_STOREDIR, said in one line."""
    taken: dict[str, tuple[Path, str]] = {}
    if "pruned_models_storedir" not in raw:
        if networks is None:
            return raw  # refused as a missing key: there are no specs of this config to take
        taken["pruned_models_storedir"] = (networks.spec_dir, "the specs of [create_network_dataset]")
    if "model_storedir" not in raw:
        taken["model_storedir"] = (DEFAULT_MODEL_STOREDIR, "the default")
    if taken:
        from perf4sight import console

        console.warn(f"{where}: no {' or '.join(taken)}; using "
                     + ", ".join(f"{key} = {path} ({source})" for key, (path, source) in taken.items()))
    return {**raw, **{key: str(path) for key, (path, _) in taken.items()}}


def load_section(path: str | Path, name: str) -> Any:
    """The settings of section `name` of the config at `path`; ConfigError when it is absent."""
    return config_section(load_config(path), name)


def config_section(config: Config, name: str) -> Any:
    """The settings of section `name` of a config read; ConfigError when it is absent."""
    settings = getattr(config, name)
    if settings is None:
        raise ConfigError(f"{config.path}: no [{name}] section")
    return settings


def parse_section(cls: type, raw: dict[str, str], *, where: str) -> Any:
    """Build the settings dataclass `cls` from raw strings; `where` prefixes every error."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            raise ConfigError(f"{where}: unknown key '{clip(key)}'; known keys: {', '.join(fields)}")
    missing = [
        name
        for name, f in fields.items()
        if name not in raw
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where}: missing required key '{missing[0]}'")
    kwargs = {key: _convert(text, hints[key], where=f"{where} {key}") for key, text in raw.items()}
    return cls(**kwargs)


def _convert(text: str, hint: Any, *, where: str) -> Any:
    text = text.strip()
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if text.lower() in ("", "none", "null"):
            return None
        return _convert(text, inner[0], where=where)
    if origin is list:
        (item,) = typing.get_args(hint)
        value = _literal(text)
        if isinstance(value, str) and value[:1] in ("[", "("):
            raise ConfigError(
                f"{where}: {clip(repr(text))} is not a Python list literal (strings in quotes: ['resnet18', 'squeezenet'])"
            )
        if isinstance(value, (list, tuple)):
            return [_scalar(v, item, where=where) for v in value]
        return [_scalar(value, item, where=where)]
    return _scalar(_literal(text), hint, where=where)


def _literal(text: str) -> Any:
    """A Python literal if the text is one, else the text itself (a bare word or path)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _scalar(value: Any, hint: Any, *, where: str) -> Any:
    expected = getattr(hint, "__name__", str(hint))
    if hint is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    elif hint is Path:
        if isinstance(value, str) and value:
            return Path(value).expanduser()
        expected = "path"
    raise ConfigError(f"{where}: expected {expected}, got {clip(repr(value))}")

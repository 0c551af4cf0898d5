"""The workload, named once: the stages a network runs in, what is measured (the
quantities, each with its kind, log column and name with unit), the datasets a test can
run at, and the checks of the values that describe a test (batch sizes, input sizes,
class counts).

The bottom of the project: the device's test config reader and logs, the host's config
reader, features, fit and prediction all import these names from here, and this module
imports nothing of theirs (nor torch). A check raises an error about its own argument,
named by the caller (`where`: `bs`, `--bs`, `t.ini [resnet18] bs`); an entry point that
read the value from a config adds the file and section (`errors.in_settings`).
"""

import numbers
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Type

from .errors import ArgumentError, clip

__all__ = [
    "STAGES",
    "Quantity",
    "MEMORY",
    "LATENCY",
    "QUANTITIES",
    "TEST_VARIABLES",
    "DATASETS",
    "MAX_BATCH_SIZE",
    "FRESH_PAGES_BYTES",
    "MAX_CLASSES",
    "MAX_INPUT_EXTENT",
    "dataset_load_options",
    "is_int_at_least",
    "is_positive_int",
    "is_positive_amount",
    "BatchSizes",
    "check_batch_sizes",
    "check_choices",
    "check_stage",
    "input_size_problem",
    "num_classes_problem",
]

# The stages a network is profiled and modelled in.
STAGES = ("training", "inference")


class Quantity(NamedTuple):
    """A measured and predicted quantity, under the three names it goes by."""

    kind: str  # a test config's `test_var`, a log folder, a config's prefix (`memory_model`)
    column: str  # its column in a `-gt.csv` log (the original tool's name, written and read as is)
    name: str  # its name with unit, on the host from the moment a log is read to the report
    unit: str  # the unit `name` ends with
    ceiling: float  # the most a log may record, in `unit`: beyond any device (a figure in other units)


# MiB of device memory used by an iteration (at most 16 TiB), milliseconds an iteration
# takes (at most a day).
MEMORY = Quantity(kind="memory", column="mem_used", name="mem_used_mib", unit="MiB", ceiling=2.0**24)
LATENCY = Quantity(kind="latency", column="latency", name="latency_ms", unit="ms", ceiling=86400e3)
QUANTITIES = (MEMORY, LATENCY)
TEST_VARIABLES = tuple(quantity.kind for quantity in QUANTITIES)
# dataset name -> (input size C,H,W, classes); 'spec' takes both from the model itself.
DATASETS: Dict[str, Optional[Tuple[Tuple[int, int, int], int]]] = {
    "spec": None,
    "imagenet": ((3, 224, 224), 1000),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
}

# Ceilings (README, "Checks and limits") of every number that enters from a config, a command
# line or a file: far above any device's reach, low enough that no computation overflows.
MAX_BATCH_SIZE = 2**20
# The C library serves every allocation above this from a fresh mapping (glibc's largest dynamic
# mmap threshold on 64-bit systems): PyTorch's CPU allocator keeps no cache, so on a CPU such a
# tensor's pages are faulted in and zeroed again at each iteration (a GPU's caching allocator
# keeps its blocks). What that costs per MiB is measured on the device (`backends`).
FRESH_PAGES_BYTES = 32 << 20
MAX_CLASSES = 10**7
MAX_INPUT_EXTENT = 2**14


def dataset_load_options(dataset: str) -> Dict[str, Any]:
    """The network loader's `input_size` and `num_classes` for a `DATASETS` name (none
    for `spec`: the model's own): what a test ran at, for the profiler and for fitting."""
    shape = DATASETS[dataset]
    return {} if shape is None else {"input_size": shape[0], "num_classes": shape[1]}


def is_int_at_least(value: object, low: int) -> bool:
    """Whether `value` is an integer of `low` or more, numpy's included (a bool, though an int, is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def is_positive_int(value: object) -> bool:
    """Whether `value` is an integer of 1 or more (`is_int_at_least`)."""
    return is_int_at_least(value, 1)


def is_positive_amount(value: object) -> bool:
    """Whether `value` is a finite number above 0 (a time budget), numpy's included (a bool is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < float("inf")


class BatchSizes(tuple):
    """Batch sizes as `check_batch_sizes` returns them: checked once, at the entry point they
    came in by (a config key, an option, a public function's argument), and passed inward as
    this record, which the layers below take as checked."""

    __slots__ = ()


def check_batch_sizes(values: Iterable[object], where: str, error: Type[Exception] = ArgumentError) -> BatchSizes:
    """`values` as `BatchSizes` (ints), if there is at least one and each is a positive integer
    up to MAX_BATCH_SIZE; else `error` naming `where` they came from. A float is refused, not
    truncated: 1.5 is no batch size. `BatchSizes` are returned as they are: checked already."""
    if isinstance(values, BatchSizes):
        return values
    sizes = list(values)
    if not sizes:
        raise error("{}: empty list; expected positive integers".format(where))
    for value in sizes:
        if not is_positive_int(value):
            raise error("{}: expected positive integers, got {}".format(where, _shown(value)))
        if value > MAX_BATCH_SIZE:
            raise error("{}: {} is above the largest batch size, {}".format(where, _shown(value), MAX_BATCH_SIZE))
    return BatchSizes(int(value) for value in sizes)


def _shown(value: object) -> str:
    """`value` as a message shows it: a numpy scalar as the plain number it holds."""
    return clip(repr(value.item() if isinstance(value, numbers.Number) and hasattr(value, "item") else value))


def check_choices(where: str, values: Sequence[Any], allowed: Sequence[str],
                  error: Type[Exception] = ArgumentError) -> None:
    """Known values, at least one (an empty list would make a test config with no tests);
    else `error` naming `where` they came from."""
    if not values:
        raise error("{}: empty list; expected one or more of {}".format(where, ", ".join(allowed)))
    for value in values:
        if value not in allowed:
            raise error("{}: unknown value {!r}; expected one of {}".format(where, value, ", ".join(allowed)))


def check_stage(stage: object, where: str, error: Type[Exception] = ArgumentError) -> None:
    """Raise `error` naming `where` the stage came from (a config key, an option, an
    argument) unless it is one of STAGES: each entry point refuses it in the same words."""
    if stage not in STAGES:
        raise error("{}: '{}' is not one of {}".format(where, stage, ", ".join(STAGES)))


def input_size_problem(value: object, name: str = "input_size") -> Optional[str]:
    """Why `value` (named `name` in the message) is no input size, three positive integers
    up to MAX_INPUT_EXTENT (channels, height, width); None when it is one."""
    if isinstance(value, (list, tuple)) and len(value) == 3 and all(
            is_positive_int(extent) and extent <= MAX_INPUT_EXTENT for extent in value):
        return None
    return "{} {} is not three positive integers up to {} (channels, height, width)".format(
        name, clip(repr(value)), MAX_INPUT_EXTENT)


def num_classes_problem(value: object) -> Optional[str]:
    """Why `value` is no class count, a positive integer up to MAX_CLASSES; None when it is one."""
    if is_positive_int(value) and value <= MAX_CLASSES:  # type: ignore[operator]
        return None
    return "num_classes {} is not a positive integer up to {}".format(clip(repr(value)), MAX_CLASSES)

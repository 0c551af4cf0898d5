"""Profiling logs: one '|'-separated CSV per model and variable, the original's layout.

`<log_dir>/<memory|latency>/<model>.csv` is the journal: rows are appended and fsynced
one at a time, the last column is the original's `params` dict, and it is what a resumed
campaign reads to skip recorded tests. `<model>-gt.csv` beside it gets the same rows with
`params` expanded into columns, as the original's clean-up step made it, with `exec_stage`
named `stage`: appended after each journalled row, and rewritten from the journal when a
campaign resumes.

Columns beyond the original's: the test's training recipe (`RECIPE_COLUMNS`, last in
the `-gt.csv`; in the journal, keys of `params`), so that one folder holds several
recipes (a log without them ran the default recipe, and reads as such), `mem_context` (MiB of runtime context in mem_used),
`latency_iters_ms` (each timed iteration, a list literal), `cpu_elsewhere` (the share of
the host's CPU other processes took while a latency test was timed; empty when too short
to tell, `contention`), `status` (`ok`; `error` for
an exception such as out of memory; `crashed` when the worker died; `skipped` for a
batch size not run after a smaller one failed under till_first_fail), `error`, `test_s`
(the seconds the test held the device: its worker's start where it needed a fresh one,
the model's build, warm-up and iterations; what a campaign costs, in the fingerprint's
report) and
`spec_sha256` (the digest of the spec the model was measured as; in the journal, with the
model file's `model_sha256`, keys of `params`). Rows
are appended in the columns of the file's own header, so a journal begun by a version
with fewer columns stays readable when resumed. A test run again (a resumed campaign
retries failures other than running out of memory) appends a row of its own: a test's
result is its last row in the journal, and the `-gt.csv` holds that row only.

Both files are read field by field with one rule (`parse_field`): the journal when a
campaign resumes, the `-gt.csv` by fingerprinting on the host (`read_gt`), so that the two
agree on every spelling of a missing value (`MISSING`).
"""

import ast
import math
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .checks import is_decimal_number, parse_decimal
from .definitions import MAX_BATCH_SIZE, QUANTITIES, STAGES, Quantity, is_positive_int
from .errors import LogFormatError, clip
from .files import write_text
from .recipe import DEFAULT_RECIPE, RECIPE_COLUMNS, Recipe
from .test_config import ProfileTest

__all__ = [
    "COLUMNS",
    "GT_COLUMNS",
    "GT_SUFFIX",
    "LAB_DEVICE",
    "MISSING",
    "MODEL_DIGEST",
    "REQUIRED_COLUMNS",
    "SPEC_DIGEST",
    "LogRow",
    "architecture_name",
    "journal_path",
    "gt_path",
    "latest_rows",
    "parse_field",
    "ran_out_of_memory",
    "read_gt",
    "read_journal",
    "append_gt_row",
    "append_row",
    "write_gt",
]

_MEMORY_FIGURES = ["mem_alloc", "mem_reserved", "mem_used", "mem_avail", "free", "capacity"]
_PARAM_COLUMNS = ["test_var", "bs", "dataset", "net_name", "model", "stage"]
# The SHA-256 of the file a row measured (`models.model_digest`; a key of the journal's `params`:
# a resumed campaign refuses logs of another file of that name) and of the spec its model was
# measured as (`models.spec_digest`; also a gt column: the host's fit refuses a spec of that name
# with other contents).
MODEL_DIGEST, SPEC_DIGEST = "model_sha256", "spec_sha256"
# The lab's device that ran a row (`perf4sight.profile.lab`; a key of the journal's `params`, in a
# campaign over several devices only).
LAB_DEVICE = "lab_device"
COLUMNS: Dict[str, List[str]] = {
    "memory": ["passed"] + _MEMORY_FIGURES + ["mem_context", "status", "error", "test_s", "params"],
    "latency": ["passed", "latency", "latency_iters_ms", "cpu_elsewhere", "status", "error", "test_s", "params"],
}
GT_COLUMNS: Dict[str, List[str]] = {
    "memory": ["passed"] + _MEMORY_FIGURES + _PARAM_COLUMNS + ["mem_context", "status", "error", "test_s"]
    + list(RECIPE_COLUMNS) + [SPEC_DIGEST],
    "latency": ["passed", "latency"] + _PARAM_COLUMNS + ["latency_iters_ms", "cpu_elsewhere", "status", "error",
                                                         "test_s"] + list(RECIPE_COLUMNS) + [SPEC_DIGEST],
}
# The columns that hold a Python literal (a number, a list, the `params` dict); `bs` holds a
# decimal numeral; every other column holds text as written (names, the outcome, and any
# column of another tool).
LITERAL_COLUMNS = frozenset(_MEMORY_FIGURES + ["latency", "mem_context", "latency_iters_ms", "cpu_elsewhere",
                                               "test_s", "params", "checkpoint_segments"])
# The spellings of "no value" in a literal column, compared stripped and lower-cased: the
# original wrote None (and -1), pandas writes nan, other tools null or nothing.
MISSING = frozenset(["", "none", "nan", "null", "-1"])
# The columns every `-gt.csv` has, whoever wrote it (the original's included).
REQUIRED_COLUMNS = ("passed", "bs", "model")
# The gt columns that name a test (the rest are what it measured).
_TEST_COLUMNS = frozenset(_PARAM_COLUMNS + list(RECIPE_COLUMNS))
SEPARATOR = "|"
# `<model>-gt.csv`: the expanded log that fingerprinting reads.
GT_SUFFIX = "-gt.csv"

LogRow = Dict[str, Any]
"""A row: column -> value (None for an empty field); `params` is the original's dict."""


def architecture_name(model: str) -> str:
    """The architecture a log row names: the file name stem of its `model` column, the
    name of its log file too (`<name>-gt.csv`). The path was written on the device,
    possibly another OS, so both separators are accepted."""
    return PurePosixPath(PureWindowsPath(model).name).stem


def journal_path(log_dir: Path, test: ProfileTest) -> Path:
    """The journal of `test`'s model and variable."""
    return log_dir / test.test_var / f"{test.log_name}.csv"


def gt_path(path: Path) -> Path:
    """The expanded `-gt.csv` beside the journal at `path`."""
    return path.with_name(f"{path.stem}{GT_SUFFIX}")


def read_journal(path: Path, *, repair: bool = False) -> List[LogRow]:
    """The rows of a journal; a torn last line (a write cut short) is ignored, or cut off
    the file when `repair`, so that the next append starts on a fresh line."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete, newline, torn = data.rpartition(b"\n")
    lines = _decode(complete, path).splitlines() if complete else []  # a file not ours is not cut
    if torn and repair:
        with open(path, "r+b") as handle:
            handle.truncate(len(complete) + len(newline))
            os.fsync(handle.fileno())
    if not lines:
        return []
    header = lines[0].split(SEPARATOR)
    if header[0] != "passed" or header[-1] != "params":
        raise LogFormatError("{}: line 1: expected a header 'passed|...|params', got {!r}".format(path, lines[0]))
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if line.strip():
            rows.append(_parse_journal(line, header, where="{}: line {}".format(path, number)))
    return rows


def latest_rows(rows: Sequence[LogRow]) -> Dict[tuple, LogRow]:
    """Each test's last row (a test run again appends a row) by test key, in the order the
    tests first appear."""
    latest: Dict[tuple, LogRow] = {}
    for row in rows:
        latest[ProfileTest.from_params(row["params"]).key] = row  # a key keeps its first place
    return latest


# What an error or a worker's death says when a test ran out of memory: PyTorch's allocators
# (CUDA's `OutOfMemoryError`, older PyTorch's "CUDA out of memory", the CPU's "can't allocate
# memory"), cuBLAS's and cuDNN's ALLOC_FAILED, Python's MemoryError, the memory-limit watchdog,
# and the SIGKILL that Linux's out-of-memory killer sends.
_OUT_OF_MEMORY_SIGNS = ("out of memory", "outofmemoryerror", "can't allocate memory", "not enough memory",
                        "alloc_failed", "memoryerror", "memory_limit_mib", "sigkill")


def ran_out_of_memory(row: LogRow) -> bool:
    """Whether a failed row is out of memory: a result the device gives again, not a failure to
    run again."""
    error = str(row.get("error") or "").lower()
    return any(sign in error for sign in _OUT_OF_MEMORY_SIGNS)


def read_gt(path: Path, targets: Sequence[str], network: Optional[str] = None) -> Tuple[List[str], List[LogRow]]:
    """The header and rows of a `-gt.csv` (ours or the original's), each field read by
    `parse_field`. Every row is checked against what fingerprinting relies on: a batch
    size, a model, a known recipe and, on a passed row, a number for each of `targets` (a
    failed row, usually out of memory, may leave them missing: None); and against its file,
    which holds one architecture's tests of one variable: its `model` is the file's
    architecture, its `test_var` the variable of `targets`, its `net_name` `network` (when
    given) and its `stage` a known one. A figure is a decimal number, finite and within
    its quantity's ceiling (a figure in other units, or a mangled one, is not fitted). The
    recipe columns are always there, the default recipe's values where the log has none
    (the original's). LogFormatError names the file and line of the first problem."""
    path = Path(path)
    lines = _decode(path.read_bytes(), path).splitlines()
    if not lines:
        raise LogFormatError("{}: empty file, expected a '|'-separated header".format(path))
    header = [name.strip() for name in lines[0].split(SEPARATOR)]
    for column in tuple(REQUIRED_COLUMNS) + tuple(targets):
        if column not in header:
            raise LogFormatError("{}: line 1: missing column '{}' (columns: {})".format(
                path, column, ", ".join(header)))
    twice = [name for name in header if header.count(name) > 1]
    if twice:
        raise LogFormatError("{}: line 1: column '{}' named twice".format(path, clip(twice[0])))
    quantities = [quantity for quantity in QUANTITIES if quantity.column in targets]
    expected = {"model": path.name[: -len(GT_SUFFIX)] if path.name.endswith(GT_SUFFIX) else path.stem,
                "test_var": quantities[0].kind if len(quantities) == 1 else None, "net_name": network}
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip(SEPARATOR + " \t"):
            continue
        where = "{}: line {}".format(path, number)
        fields = line.split(SEPARATOR)
        if len(fields) != len(header):
            raise LogFormatError("{}: {} fields, the header has {}".format(where, len(fields), len(header)))
        row = {name: parse_field(name, text, where=where) for name, text in zip(header, fields)}
        text = dict(zip(header, fields))
        if not (is_positive_int(row["bs"]) and row["bs"] <= MAX_BATCH_SIZE):
            raise LogFormatError("{}: bs={}, expected a positive integer up to {}".format(
                where, clip(repr(text["bs"])), MAX_BATCH_SIZE))
        if row["model"] is None:
            raise LogFormatError("{}: empty 'model'".format(where))
        _check_identity(row, expected, where=where)
        for quantity in quantities:
            _check_figure(row, text[quantity.column], quantity, where=where)
        row.update(Recipe.from_columns(row, where=where, error=LogFormatError).columns())
        rows.append(row)
    return header + [column for column in RECIPE_COLUMNS if column not in header], rows


def _check_identity(row: LogRow, expected: Dict[str, Optional[str]], *, where: str) -> None:
    """Refuse a row that is not of its file: another architecture, variable or network
    (`expected`, None where anything goes), or a stage that is none of STAGES."""
    found = dict(row, model=architecture_name(row["model"]))
    for column, value in expected.items():
        if value is not None and found.get(column) is not None and found[column] != value:
            raise LogFormatError("{}: {}={}, but the file holds the tests of {}={}".format(
                where, column, clip(repr(row[column])), column, clip(repr(value))))
    stage = row.get("stage")
    if stage is not None and stage not in STAGES:
        raise LogFormatError("{}: stage={}, expected one of {}".format(where, clip(repr(stage)), ", ".join(STAGES)))


def _check_figure(row: LogRow, text: str, quantity: Quantity, *, where: str) -> None:
    """Refuse a figure of `quantity` that is not a decimal number (`0x10`), not finite or
    above its ceiling, and a passed row without one."""
    column = quantity.column
    value = row[column]
    if value is None:
        if row["passed"]:
            raise LogFormatError("{}: {}={}, expected a number".format(where, column, clip(repr(text))))
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and is_decimal_number(text)
    if not number or not math.isfinite(value):
        raise LogFormatError("{}: {}={}, expected a decimal number".format(where, column, clip(repr(text))))
    if abs(value) > quantity.ceiling:
        raise LogFormatError("{}: {}={}, more than any device ({:.0f} {}): a figure in other units?".format(
            where, column, clip(repr(text)), quantity.ceiling, quantity.unit))


def _decode(data: bytes, path: Path) -> str:
    """The log's text; LogFormatError naming the line when it is not UTF-8 (perf4sight
    writes UTF-8, so another encoding means a foreign or damaged file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LogFormatError("{}: line {}: not UTF-8 text ({})".format(path, line, exc.reason)) from None


def _parse_journal(line: str, header: List[str], *, where: str) -> LogRow:
    fields = line.split(SEPARATOR)
    if len(fields) < len(header):
        raise LogFormatError("{}: {} fields, the header has {}".format(where, len(fields), len(header)))
    # params is last and may itself contain the separator
    fields = fields[: len(header) - 1] + [SEPARATOR.join(fields[len(header) - 1:])]
    row = {name: parse_field(name, text, where=where) for name, text in zip(header, fields)}
    try:
        ProfileTest.from_params(row["params"])
    except (KeyError, ValueError, TypeError) as exc:
        raise LogFormatError("{}: params lacks or mangles {}".format(where, exc)) from None
    return row


def parse_field(name: str, text: str, *, where: str) -> Any:
    """The value of one field of column `name`, the one rule of both logs: `passed` is True
    or False; `bs` is a decimal numeral (None when it is not one: '0x10' is no batch size);
    a literal column (`LITERAL_COLUMNS`) holds a Python literal, or None for any spelling
    in `MISSING`; any other column is text (None when empty)."""
    word = text.strip()
    if name == "passed":
        if word.lower() not in ("true", "false"):
            raise LogFormatError("{}: passed={}, expected True or False".format(where, clip(repr(text))))
        return word.lower() == "true"
    if name == "bs":
        return parse_decimal(word)
    if name not in LITERAL_COLUMNS:
        return word or None
    if word.lower() in MISSING:
        return None
    try:
        return ast.literal_eval(word)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise LogFormatError("{}: {}={}, expected a Python literal".format(where, name, clip(repr(text)))) from None


def append_row(path: Path, test_var: str, row: LogRow) -> None:
    """Append one row (writing the header first for a new file) and fsync it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = _header(path)
    text = ""
    if columns is None:
        columns = COLUMNS[test_var]
        text = SEPARATOR.join(columns) + "\n"
    text += SEPARATOR.join(_field(row.get(c)) for c in columns) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _header(path: Path) -> Optional[List[str]]:
    """The columns named by the file's first line; None for a missing or empty file."""
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        first = _decode(handle.readline(), path).rstrip("\r\n")
    return first.split(SEPARATOR) if first else None


def _field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return " ".join(value.replace(SEPARATOR, "/").split())
    return repr(value) if isinstance(value, (float, list, dict)) else str(value)


def write_gt(path: Path, test_var: str) -> Path:
    """Rewrite `<model>-gt.csv` from the journal at `path`, each test's last row; returns the
    gt path."""
    target = gt_path(path)
    lines = [SEPARATOR.join(GT_COLUMNS[test_var])]
    lines.extend(_gt_line(row, GT_COLUMNS[test_var]) for row in latest_rows(read_journal(path)).values())
    write_text(target, "\n".join(lines) + "\n")
    return target


def append_gt_row(path: Path, test_var: str, row: LogRow) -> None:
    """Add the row just journalled at `path` to `<model>-gt.csv` (header first for a new
    file); a row of the same test already there (a failure run again, a journal deleted
    since) is replaced in its place, so the gt holds each test once. Not synced: should a
    crash lose it, the resumed campaign rewrites the file from the journal."""
    target = gt_path(path)
    columns = _header(target)
    if columns is not None and any(column not in columns for column in RECIPE_COLUMNS):
        columns = _add_recipe_columns(target, columns)
    if columns is None:
        columns = GT_COLUMNS[test_var]
        text = SEPARATOR.join(columns) + "\n" + _gt_line(row, columns) + "\n"
    else:
        line = _gt_line(row, columns)
        lines = _decode(target.read_bytes(), target).splitlines()
        test = _gt_test(line, columns)
        same = [number for number in range(1, len(lines)) if _gt_test(lines[number], columns) == test]
        if same:
            lines[same[0]] = line
            write_text(target, "\n".join(old for number, old in enumerate(lines) if number not in same[1:]) + "\n")
            return
        text = line + "\n"
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(text)


def _add_recipe_columns(target: Path, columns: List[str]) -> List[str]:
    """Give a gt file without some recipe columns (the original's, or one written before a
    column was added) those columns, last, each of its rows the default recipe's values (what
    it ran); its columns now. Its rows are kept: the original's gt files have no journal."""
    missing = [column for column in RECIPE_COLUMNS if column not in columns]
    defaults = SEPARATOR.join(_field(getattr(DEFAULT_RECIPE, column)) for column in missing)
    lines = _decode(target.read_bytes(), target).splitlines()
    lines = [lines[0] + SEPARATOR + SEPARATOR.join(missing)] + [
        line + SEPARATOR + defaults for line in lines[1:] if line.strip(SEPARATOR + " \t")]
    write_text(target, "\n".join(lines) + "\n")
    return columns + missing


def _gt_test(line: str, columns: List[str]) -> Tuple[str, ...]:
    """What names a gt line's test: its fields in the test's columns (its parameters and
    recipe) that the file has, its model by name (as `ProfileTest.key`)."""
    return tuple(architecture_name(text) if column == "model" else text
                 for column, text in zip(columns, line.split(SEPARATOR)) if column in _TEST_COLUMNS)


def _gt_line(row: LogRow, columns: List[str]) -> str:
    """A journal row with `params` expanded into `columns` (with the recipe's, the default
    for a row of the original) and `exec_stage` named `stage`."""
    params = row["params"]
    expanded = dict(row)
    expanded.update(ProfileTest.from_params(params).recipe.columns())
    expanded.update((k, v) for k, v in params.items() if k != "exec_stage")
    expanded["stage"] = params["exec_stage"]
    return SEPARATOR.join(_field(expanded.get(c)) for c in columns)

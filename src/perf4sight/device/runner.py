"""The bundle's runner: `python3 run_profile.py` on the device profiles every test of
the bundle's test config into `<bundle>/logs`, as `perf4sight profile run` would (with a
budget, those the device has time for: the test config lists them in the order picked).

The defaults of every option are the [profile] settings the bundle was made with
(`bundle.json`). Model paths in the test config are relative to the bundle, so the
bundle works wherever it is copied.
"""

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import console
from .definitions import is_int_at_least, is_positive_amount
from .errors import Perf4sightError

__all__ = ["BUNDLE_FILE", "RUN_KEYS", "defaults_problem", "interrupt", "main"]

BUNDLE_FILE = "bundle.json"


def _parser(defaults: Dict[str, Any]) -> argparse.ArgumentParser:
    from .backends import BACKENDS, DEVICE_ALIASES

    parser = argparse.ArgumentParser(
        prog="run_profile.py",
        description="Profile every test of this bundle's test config ({}) on this device; defaults are the "
                    "[profile] settings the bundle was made with.".format(defaults["test_config"]),
    )
    devices = ", ".join(list(BACKENDS) + list(DEVICE_ALIASES))
    parser.add_argument("--device", default=defaults["device"],
                        help="backend: {} (default: %(default)s)".format(devices))
    parser.add_argument("--gpu-id", type=int, default=defaults["gpu_id"], help="CUDA device (default: %(default)s)")
    parser.add_argument("--log-dir", default=None,
                        help="where the logs go (default: {}/ in the bundle)".format(defaults["log_dir"]))
    parser.add_argument("--iterations", type=int, default=defaults["iterations"],
                        help="timed iterations per test (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=defaults["warmup"],
                        help="iterations before timing (default: %(default)s)")
    parser.add_argument("--memory-limit-mib", type=_limit, default=defaults["memory_limit_mib"],
                        help="kill a test's worker above this resident memory; 'none' for no limit "
                             "(default: %(default)s)")
    parser.add_argument("--till-first-fail", action="store_true", default=defaults["till_first_fail"],
                        help="after a batch size fails, skip the larger ones of that model, stage and "
                             "variable (default: %(default)s)")
    parser.add_argument("--no-till-first-fail", dest="till_first_fail", action="store_false",
                        help="run every batch size")
    parser.add_argument("--retry-failed", action="store_true", default=defaults["retry_failed"],
                        help="when resuming, run again the tests that failed for another reason than "
                             "running out of memory (default: %(default)s)")
    parser.add_argument("--no-retry-failed", dest="retry_failed", action="store_false",
                        help="when resuming, keep every recorded failure")
    parser.add_argument("--budget-minutes", type=_minutes, default=defaults["budget_minutes"],
                        help="start no test once the tests run have held the device this many minutes (the "
                             "rest is left for the next run); 'none' for no budget (default: %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress or info lines")
    return parser


def _repeated_option(parser: argparse.ArgumentParser, argv: List[str]) -> Optional[str]:
    """What names an option given more than once in `argv` (or with its opposite,
    `--retry-failed` and `--no-retry-failed`), where argparse would keep the last; None."""
    dests = {flag: action.dest for action in parser._actions for flag in action.option_strings}
    given: Dict[str, List[str]] = {}
    for word in argv:
        flag = word.split("=", 1)[0]
        if flag in dests:
            given.setdefault(dests[flag], []).append(flag)
    for flags in given.values():
        distinct = list(dict.fromkeys(flags))
        if len(distinct) > 1:
            return "{} are given together; give one".format(" and ".join(distinct))
        if len(flags) > 1:
            return "{} is given {}; give it once".format(
                flags[0], "twice" if len(flags) == 2 else "{} times".format(len(flags)))
    return None


def _limit(text: str) -> Optional[int]:
    """A --memory-limit-mib value: an integer, or 'none' for no limit."""
    return None if text.strip().lower() == "none" else int(text)


def _minutes(text: str) -> Optional[float]:
    """A --budget-minutes value: minutes above 0, or 'none' for no budget."""
    if text.strip().lower() == "none":
        return None
    value = float(text)
    if not is_positive_amount(value):
        raise ValueError(text)
    return value


def interrupt(signum: int, frame: Any) -> None:
    """A SIGTERM handler: a termination request (a job scheduler's stop, `kill`) stops a run
    as Ctrl-C does, so the worker is stopped with it and what was recorded is kept."""
    raise KeyboardInterrupt


# The [profile] run keys whose values a bundle records as the runner's defaults, beside its
# test config and log folder.
RUN_KEYS = ("device", "gpu_id", "iterations", "warmup", "memory_limit_mib", "till_first_fail", "retry_failed",
            "budget_minutes")


# What each recorded default must be (a bool is no count: `iterations = true`), and how a
# message says it.
_DEFAULTS = {
    "test_config": (lambda value: isinstance(value, str), "a path"),
    "log_dir": (lambda value: isinstance(value, str), "a path"),
    "device": (lambda value: isinstance(value, str), "a device name"),
    "gpu_id": (lambda value: is_int_at_least(value, 0), "an integer >= 0"),
    "iterations": (lambda value: is_int_at_least(value, 1), "an integer >= 1"),
    "warmup": (lambda value: is_int_at_least(value, 0), "an integer >= 0"),
    "memory_limit_mib": (lambda value: value is None or is_int_at_least(value, 1), "a positive integer or null"),
    "till_first_fail": (lambda value: isinstance(value, bool), "true or false"),
    "retry_failed": (lambda value: isinstance(value, bool), "true or false"),
    "budget_minutes": (lambda value: value is None or is_positive_amount(value), "minutes above 0 or null"),
}


def defaults_problem(defaults: Any) -> Optional[str]:
    """Why a bundle's recorded defaults cannot run (None when they can): a key missing or a
    value of the wrong type, found before the first test rather than recorded as every test's
    failure."""
    if not isinstance(defaults, dict):
        return "defaults: expected an object, got {!r}".format(defaults)
    for key in ("test_config", "log_dir") + RUN_KEYS:
        if key not in defaults:
            return "no default for {}".format(key)
        accepts, expected = _DEFAULTS[key]
        if not accepts(defaults[key]):
            return "{} = {}: expected {}".format(key, json.dumps(defaults[key]), expected)
    return None


def main(bundle_dir: str, argv: Optional[List[str]] = None) -> int:
    """Run the bundle at `bundle_dir`; returns the exit code (2 for bad input, 130 when
    interrupted or terminated: what was recorded is kept, and a rerun resumes)."""
    bundle = Path(bundle_dir).resolve()
    try:
        defaults = json.loads((bundle / BUNDLE_FILE).read_text(encoding="utf-8"))["defaults"]
        problem = defaults_problem(defaults)
        if problem:
            raise ValueError(problem)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print("error: {}: not a bundle's record ({})".format(bundle / BUNDLE_FILE, exc), file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401  (before anything else needs it: one line where it is missing)
    except ImportError as exc:
        print("error: PyTorch cannot be imported by {} ({}); install the PyTorch of this device's "
              "JetPack or platform".format(sys.executable, exc), file=sys.stderr)
        return 2
    parser = _parser(defaults)
    argv = sys.argv[1:] if argv is None else argv
    repeated = _repeated_option(parser, argv)
    if repeated:
        print("error: {}".format(repeated), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    console.set_quiet(args.quiet)
    log_dir = Path(args.log_dir).resolve() if args.log_dir is not None else bundle / defaults["log_dir"]
    signal.signal(signal.SIGTERM, interrupt)
    os.chdir(str(bundle))  # the test config's model paths are relative to the bundle
    try:
        from .campaign import profile_campaign
        from .test_config import read_test_config

        profile_campaign(
            read_test_config(defaults["test_config"]), log_dir=log_dir, device=args.device,
            gpu_id=args.gpu_id, iterations=args.iterations, warmup=args.warmup,
            till_first_fail=args.till_first_fail, retry_failed=args.retry_failed,
            memory_limit_mib=args.memory_limit_mib,
            budget_s=None if args.budget_minutes is None else 60.0 * args.budget_minutes,
        )
    except (Perf4sightError, OSError) as exc:  # OSError: a log folder blocked by a file, no permission, a full disk
        print("error: {}".format(" ".join(str(exc).split())), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aborted", file=sys.stderr)
        return 130
    return 0

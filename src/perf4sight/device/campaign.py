"""A profiling campaign: every test of a test config, crash-isolated and resumable.

Latency tests share a worker process; each memory test runs in a worker that has run
no test before it, as a user's training script is a process of its own.

Tests already in the logs are skipped, so a campaign killed at any point (SIGKILL
included) picks up where it stopped when started again. A test is known in the logs by its
model's name, whatever path the file had, and each row records the digests of the file it
measured and of its spec (`model_sha256` and `spec_sha256` in `params`): logs of another file
under the same name (another bundle's networks, a model written again) are refused, never
taken as this one's, and the host's fit refuses a spec other than the one measured; a test that failed for another
reason than running out of memory (an error in a model's code, a worker killed by hand)
is run again, unless `retry_failed` is off, and its new row is its result. With `till_first_fail`, a
failed batch size ends its model's run for that stage and variable: the larger batch
sizes are recorded as `skipped` (passed=False), which also makes a resumed campaign
skip them again. One campaign at a time writes into a log folder (`lock.py`).

The host's `perf4sight profile run` and a bundle's runner both call `profile_campaign`;
the host hands it its model loader, model check and console.
"""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import console as plain_console
from .backends import BACKENDS, backend_name
from .definitions import is_int_at_least, is_positive_int
from .contention import BUSY_ELSEWHERE_WARNING
from .environment import environment_record, write_environment
from .errors import ArgumentError, ConfigError
from .lock import LogFolderLock
from .logs import MODEL_DIGEST, SPEC_DIGEST, LogRow, append_gt_row, append_row, journal_path, latest_rows, ran_out_of_memory, read_journal, write_gt
from .models import check_model_files, import_loader, model_digest, spec_digest
from .test_config import ProfileTest
from .worker import WorkerCrashed, WorkerProcess
from .workload import TestOutcome, check_recipes

__all__ = ["TestResult", "CampaignSummary", "check_run", "profile_campaign"]


class TestResult:
    """A test of this campaign and what became of it (status: ok, error, crashed, skipped)."""

    def __init__(self, test: ProfileTest, status: str, outcome: Optional[TestOutcome]) -> None:
        self.test = test
        self.status = status
        self.outcome = outcome

    def __repr__(self) -> str:
        return "TestResult({!r}, {!r}, {!r})".format(self.test, self.status, self.outcome)

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    @property
    def latency_ms(self) -> Optional[float]:
        times = self.outcome.latency_iters_ms if self.outcome is not None else []
        return sum(times) / len(times) if times and self.passed else None


class CampaignSummary:
    """What a campaign did; `already_recorded` counts tests found in the logs and not rerun."""

    def __init__(self) -> None:
        self.results: List[TestResult] = []
        self.already_recorded = 0
        self.environment_file: Optional[Path] = None

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def passed(self) -> int:
        return self.count("ok")

    @property
    def failed(self) -> int:
        return self.count("error") + self.count("crashed")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def disturbed(self) -> List[TestResult]:
        """Passed latency tests timed while other processes took a large share of the CPU."""
        return [r for r in self.results if r.test.test_var == "latency" and _elsewhere(r) >= BUSY_ELSEWHERE_WARNING]


def profile_campaign(
    tests: Sequence[ProfileTest],
    *,
    log_dir: Path,
    device: str = "cpu",
    gpu_id: int = 0,
    iterations: int = 3,
    warmup: int = 1,
    till_first_fail: bool = False,
    retry_failed: bool = True,
    save: bool = True,
    memory_limit_mib: Optional[int] = None,
    loader: Optional[str] = None,
    check_models: Callable[[Sequence[ProfileTest]], None] = check_model_files,
    console: Any = plain_console,
) -> CampaignSummary:
    """Run `tests` on `device`, appending each result to the logs under `log_dir`.

    `loader` names the function that builds a test's model in the worker
    (`module:function`; None: standalone model files, `models.load_model_file`);
    `check_models` refuses, before any test, models that loader cannot build, and
    `check_recipes` recipes the device or a test's network cannot run; `console`
    has `info`, `warn`, `print_table` and `progress` (`console.py`).
    """
    check_run(iterations, warmup, memory_limit_mib)
    backend = backend_name(device)
    log_dir = Path(log_dir)
    _check_log_names(tests)
    digests = {model: {MODEL_DIGEST: model_digest(model), SPEC_DIGEST: spec_digest(model)}
               for model in dict.fromkeys(test.model for test in tests)}
    # checked before the log folder is made or locked: a bad model is one line, nothing written
    todo = _todo(tests, _kept(_recorded(tests, log_dir, digests, repair=False), retry_failed) if save else {})
    check_models(todo)
    check_recipes(todo, import_loader(loader), BACKENDS[backend].device_type)
    if not save:
        return _run(tests, {}, log_dir, backend, gpu_id, iterations, warmup, till_first_fail, False,
                    memory_limit_mib, loader, digests, console)
    with LogFolderLock(log_dir):
        recorded = _recorded(tests, log_dir, digests, repair=True)
        kept = _kept(recorded, retry_failed)
        if len(kept) < len(recorded):
            console.info("{} failed tests (not out of memory) run again; retry_failed off keeps them "
                         "as failed".format(len(recorded) - len(kept)))
        return _run(tests, kept, log_dir, backend, gpu_id, iterations, warmup, till_first_fail, True,
                    memory_limit_mib, loader, digests, console)


def _check_log_names(tests: Sequence[ProfileTest]) -> None:
    """Refuse two model files of one name: their tests would share one log."""
    named: Dict[str, str] = {}
    for test in tests:
        first = named.setdefault(test.log_name, test.model)
        if first != test.model:
            raise ConfigError("test config: models {} and {} have one name, {}, and would share its logs; "
                              "rename one".format(first, test.model, test.log_name))


def _todo(tests: Sequence[ProfileTest], recorded: Dict[tuple, LogRow]) -> List[ProfileTest]:
    return [t for t in tests if t.key not in recorded]


def _kept(recorded: Dict[tuple, LogRow], retry_failed: bool) -> Dict[tuple, LogRow]:
    """The recorded rows a campaign keeps: all of them without `retry_failed`; otherwise all but
    failures other than out of memory, and the batch sizes skipped after those."""
    if not retry_failed:
        return recorded
    retried: Dict[tuple, int] = {}  # test group -> smallest batch size run again
    for row in recorded.values():
        if row.get("status") in ("error", "crashed") and not ran_out_of_memory(row):
            _note_failure(retried, ProfileTest.from_params(row["params"]))
    if not retried:
        return recorded
    kept: Dict[tuple, LogRow] = {}
    for key, row in recorded.items():
        test = ProfileTest.from_params(row["params"])
        rerun = row.get("status") == "skipped" or not (row["passed"] or ran_out_of_memory(row))
        if not rerun or test.bs < retried.get(test.group, test.bs + 1):
            kept[key] = row
    return kept


def _run(tests: Sequence[ProfileTest], recorded: Dict[tuple, LogRow], log_dir: Path, backend: str, gpu_id: int,
         iterations: int, warmup: int, till_first_fail: bool, save: bool, memory_limit_mib: Optional[int],
         loader: Optional[str], digests: Dict[str, Dict[str, Optional[str]]], console: Any) -> CampaignSummary:
    summary = CampaignSummary()
    failed_at: Dict[tuple, int] = {}  # test group -> smallest failed batch size
    for row in recorded.values():
        if not row["passed"] and row.get("status") != "skipped":
            _note_failure(failed_at, ProfileTest.from_params(row["params"]))
    todo = _todo(tests, recorded)
    summary.already_recorded = len(tests) - len(todo)
    if summary.already_recorded:
        console.info("{} of {} tests already in {}; resuming".format(summary.already_recorded, len(tests), log_dir))
    worker = WorkerProcess(
        backend, gpu_id=gpu_id, memory_limit_mib=memory_limit_mib,
        log_path=log_dir / "worker.log" if save else None, loader=loader,
    )
    settings = {"device": backend, "gpu_id": gpu_id, "iterations": iterations, "warmup": warmup,
                "till_first_fail": till_first_fail, "memory_limit_mib": memory_limit_mib}
    with worker, console.progress("profiling", total=len(todo)) as bar:
        for test in todo:
            label = "{} bs={} {} {}".format(test.log_name, test.bs, test.stage, test.test_var)
            bar.label(label)
            if till_first_fail and failed_at.get(test.group, test.bs + 1) < test.bs:
                result = TestResult(test, "skipped", None)
            else:
                if test.test_var == "memory" and worker.tests_run:
                    worker.stop()  # a memory test's reading holds nothing an earlier test left
                if not worker.alive and save and summary.environment_file is None:
                    _record_environment(worker, settings, log_dir, summary, console)
                result = _run_one(worker, test, iterations=iterations, warmup=warmup)
                if not result.passed:
                    _note_failure(failed_at, test)
                    worker.stop()  # a fresh interpreter after any failure
            summary.results.append(result)
            if save:
                path = journal_path(log_dir, test)
                row = _row(result, digests[test.model])
                append_row(path, test.test_var, row)
                append_gt_row(path, test.test_var, row)  # in place of a failure's row run again
            bar.advance(label)
    _report(summary, log_dir if save else None, console)
    return summary


def _record_environment(worker: WorkerProcess, settings: Dict[str, Any], log_dir: Path,
                        summary: CampaignSummary, console: Any) -> None:
    """Start the worker and write the environment record; warn when a Jetson's clocks may
    change under the measurements."""
    worker.start()
    summary.environment_file = write_environment(log_dir, environment_record(worker.facts, settings))
    if worker.facts.get("clocks_locked") is False:
        console.warn(
            "the device's clocks are not locked (power mode: {}): latencies may vary with the governor; "
            "run `sudo jetson_clocks` (and choose the power mode with `sudo nvpmodel -m N`) before "
            "profiling".format(worker.facts.get("power_mode") or "unknown")
        )


def check_run(iterations: int, warmup: int, memory_limit_mib: Optional[int]) -> None:
    """Refuse run settings no campaign can use (a float or a bool is no count of iterations)."""
    if not is_positive_int(iterations) or not is_int_at_least(warmup, 0):
        raise ArgumentError("iterations >= 1 and warmup >= 0 needed, integers, got {!r}, {!r}".format(
            iterations, warmup))
    if memory_limit_mib is not None and not is_positive_int(memory_limit_mib):
        raise ArgumentError("memory_limit_mib: expected a positive integer (MiB), got {!r}".format(
            memory_limit_mib))


def _elsewhere(result: TestResult) -> float:
    """The share of the CPU other processes took during a passed test (0 when unknown)."""
    if not result.passed or result.outcome is None:
        return 0.0
    return result.outcome.cpu_elsewhere or 0.0


def _note_failure(failed_at: Dict[tuple, int], test: ProfileTest) -> None:
    failed_at[test.group] = min(failed_at.get(test.group, test.bs), test.bs)


def _run_one(worker: WorkerProcess, test: ProfileTest, *, iterations: int, warmup: int) -> TestResult:
    try:
        outcome = worker.run(test, iterations=iterations, warmup=warmup)
    except WorkerCrashed as exc:
        return TestResult(test, "crashed", TestOutcome(False, [], None, str(exc)))
    return TestResult(test, "ok" if outcome.passed else "error", outcome)


def _recorded(tests: Sequence[ProfileTest], log_dir: Path, digests: Dict[str, Dict[str, Optional[str]]], *,
              repair: bool) -> Dict[tuple, LogRow]:
    """Rows already in the logs of these tests' models, by test key; with `repair`, torn
    lines are cut off and the `-gt.csv` files rewritten from their journals. ConfigError
    when a row measured another file than the test's model (`digests`, by model entry)."""
    recorded: Dict[tuple, LogRow] = {}
    for path in dict.fromkeys(journal_path(log_dir, t) for t in tests):
        rows = read_journal(path, repair=repair)
        recorded.update(latest_rows(rows))
        if rows and repair:
            write_gt(path, path.parent.name)
    for test in tests:
        measured = recorded.get(test.key, {}).get("params", {}).get(MODEL_DIGEST)
        now = digests[test.model][MODEL_DIGEST]
        if None not in (measured, now) and measured != now:  # no file now: refused as missing later
            raise ConfigError(
                "{}: holds tests of another {} than {} (measured from a file of other contents: another "
                "network of that name?); give another log_dir, or move those logs away to measure it".format(
                    journal_path(log_dir, test), test.log_name, test.model))
    return recorded


def _row(result: TestResult, digests: Dict[str, Optional[str]]) -> LogRow:
    outcome = result.outcome
    memory = outcome.memory if outcome is not None else None
    params = result.test.params()
    params.update((key, digest) for key, digest in digests.items() if digest is not None)
    row: LogRow = {
        "passed": result.passed,
        "status": result.status,
        "error": outcome.error if outcome is not None else None,
        "params": params,
        "latency": result.latency_ms,
        "latency_iters_ms": outcome.latency_iters_ms if outcome is not None and outcome.latency_iters_ms else None,
    }
    if result.test.test_var == "latency" and outcome is not None:
        share = outcome.cpu_elsewhere
        row["cpu_elsewhere"] = None if share is None else round(share, 3)
    if memory is not None:
        row.update(memory._asdict())
    return row


def _report(summary: CampaignSummary, log_dir: Optional[Path], console: Any) -> None:
    console.print_table(
        "profiling summary",
        ["passed", "failed", "skipped", "already recorded"],
        [[summary.passed, summary.failed, summary.skipped, summary.already_recorded]],
    )
    disturbed = summary.disturbed
    if disturbed:
        worst = max(disturbed, key=_elsewhere)
        timed = sum(r.passed and r.test.test_var == "latency" for r in summary.results)
        console.warn(
            "{} of {} latency tests ran while other processes took {:.0%} or more of the CPU (most: {:.0%}, "
            "{} bs={} {}); their latencies may be too long: profile on an otherwise idle machine".format(
                len(disturbed), timed, BUSY_ELSEWHERE_WARNING, _elsewhere(worst),
                worst.test.log_name, worst.test.bs, worst.test.stage)
        )
    if log_dir is not None:
        console.info("logs in {}".format(log_dir))

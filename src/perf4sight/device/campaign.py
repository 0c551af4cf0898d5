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

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from . import console as plain_console
from .backends import BACKENDS, backend_name
from .definitions import is_int_at_least, is_positive_amount, is_positive_int
from .contention import BUSY_ELSEWHERE_WARNING
from .environment import Environment, environment_record, write_environment
from .errors import ArgumentError, ConfigError
from .lock import LogFolderLock
from .logs import LAB_DEVICE, MODEL_DIGEST, SPEC_DIGEST, LogRow, append_gt_row, append_row, journal_path, latest_rows, ran_out_of_memory, read_journal, write_gt
from .models import check_model_files, import_loader, model_digest, spec_digest
from .test_config import ProfileTest
from .worker import WorkerCrashed, WorkerProcess
from .workload import TestOutcome, check_recipes

__all__ = ["TestResult", "CampaignSummary", "CampaignJournal", "LocalDevice", "RunOptions", "check_run",
           "profile_campaign", "run_on_worker"]


class TestResult:
    """A test of this campaign and what became of it (status: ok, error, crashed, skipped),
    and the seconds it held the device (None where it did not run)."""

    def __init__(self, test: ProfileTest, status: str, outcome: Optional[TestOutcome],
                 seconds: Optional[float] = None) -> None:
        self.test = test
        self.status = status
        self.outcome = outcome
        self.seconds = seconds

    def __repr__(self) -> str:
        return "TestResult({!r}, {!r}, {!r}, {!r})".format(self.test, self.status, self.outcome, self.seconds)

    @classmethod
    def crashed(cls, test: ProfileTest, reason: str, seconds: Optional[float] = None) -> "TestResult":
        """`test` whose worker (or a lab's device) died under it, with the reason."""
        return cls(test, "crashed", TestOutcome(False, [], None, reason), seconds)

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
        self.not_run = 0  # tests left for a later run: the budget was spent before them
        self.environment_file: Optional[Path] = None

    @property
    def device_s(self) -> float:
        """The seconds this run's tests held the device."""
        return sum(r.seconds or 0.0 for r in self.results)

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


class RunOptions(NamedTuple):
    """How each test of a campaign runs: on which backend, its iterations, the worker's limits."""

    backend: str
    gpu_id: int
    iterations: int
    warmup: int
    memory_limit_mib: Optional[int]
    loader: Optional[str]
    log_path: Optional[Path]  # the worker's output (None: discarded)

    def settings(self, till_first_fail: bool) -> Dict[str, Any]:
        """What the environment record says the campaign ran with."""
        return {"device": self.backend, "gpu_id": self.gpu_id, "iterations": self.iterations,
                "warmup": self.warmup, "till_first_fail": till_first_fail,
                "memory_limit_mib": self.memory_limit_mib}

    def worker(self) -> WorkerProcess:
        return WorkerProcess(self.backend, gpu_id=self.gpu_id, memory_limit_mib=self.memory_limit_mib,
                             log_path=self.log_path, loader=self.loader)


class CampaignJournal:
    """What a campaign keeps of its results, whoever runs the tests: the summary, each row in
    the logs (when saving), the batch sizes left out under `till_first_fail`, the progress
    line and the environment records. A runner (`LocalDevice`, or a lab's on the host) starts
    no test once `spent` (the budget of device seconds), asks `skips` before running a test,
    calls `started` and `record` around it, and `environment` once per device it starts."""

    def __init__(self, recorded: Dict[tuple, LogRow], log_dir: Path, *, save: bool, till_first_fail: bool,
                 digests: Dict[str, Dict[str, Optional[str]]], bar: Any, budget_s: Optional[float] = None) -> None:
        self.summary = CampaignSummary()
        self.log_dir = log_dir
        self.save = save
        self.till_first_fail = till_first_fail
        self.budget_s = budget_s
        self.digests = digests
        self.bar = bar
        self._failed_at: Dict[tuple, int] = {}  # test group -> smallest failed batch size
        for row in recorded.values():
            if not row["passed"] and row.get("status") != "skipped":
                _note_failure(self._failed_at, ProfileTest.from_params(row["params"]))

    @property
    def spent(self) -> bool:
        """Whether this run's tests have held the device for the budget (`budget_s`) or longer."""
        return self.budget_s is not None and self.summary.device_s >= self.budget_s

    def skips(self, test: ProfileTest) -> bool:
        """Whether `test` is left out: a smaller batch size of its group failed, under till_first_fail."""
        return self.till_first_fail and self._failed_at.get(test.group, test.bs + 1) < test.bs

    def started(self, test: ProfileTest) -> None:
        self.bar.label(_label(test))

    def record(self, result: TestResult, *, device: Optional[str] = None) -> None:
        """Keep `result`: in the summary and, when saving, as a row of its model's logs;
        `device` names the lab's device that ran it (a key of the journal's `params`)."""
        if not result.passed and result.status != "skipped":
            _note_failure(self._failed_at, result.test)
        self.summary.results.append(result)
        if self.save:
            path = journal_path(self.log_dir, result.test)
            row = _row(result, self.digests[result.test.model], device)
            append_row(path, result.test.test_var, row)
            append_gt_row(path, result.test.test_var, row)  # in place of a failure's row run again
        self.bar.advance(_label(result.test))

    def environment(self, record: Dict[str, Any], console: Any, *, device: Optional[str] = None) -> None:
        """Write a device's environment record beside the logs (when saving); warn when a
        Jetson's clocks may change under the measurements."""
        if self.save:
            self.summary.environment_file = write_environment(self.log_dir, record, device=device)
        environment = Environment.of(record, "the environment record")
        if environment.clocks_locked is False:
            console.warn(
                "{}the device's clocks are not locked (power mode: {}): latencies may vary with the governor; "
                "run `sudo jetson_clocks` (and choose the power mode with `sudo nvpmodel -m N`) before "
                "profiling".format("{}: ".format(device) if device else "", environment.power_mode or "unknown")
            )


def run_on_worker(worker: WorkerProcess, test: ProfileTest, *, iterations: int, warmup: int) -> TestResult:
    """Run `test` on `worker` as every campaign does: a memory test in an interpreter that has
    run no test (its reading holds nothing an earlier test left), and a fresh interpreter after
    any failure."""
    started = time.monotonic()
    if test.test_var == "memory" and worker.tests_run:
        worker.stop()
    try:
        outcome = worker.run(test, iterations=iterations, warmup=warmup)
    except WorkerCrashed as exc:
        result = TestResult.crashed(test, str(exc), time.monotonic() - started)
    else:
        result = TestResult(test, "ok" if outcome.passed else "error", outcome, time.monotonic() - started)
    if not result.passed:
        worker.stop()
    return result


class LocalDevice:
    """The runner of a campaign on this machine's device: one worker, the tests one after
    another (`profile_campaign`'s default)."""

    def run_tests(self, todo: Sequence[ProfileTest], journal: CampaignJournal, options: RunOptions,
                  console: Any) -> None:
        with options.worker() as worker:
            for test in todo:
                if journal.spent:
                    return
                journal.started(test)
                if journal.skips(test):
                    journal.record(TestResult(test, "skipped", None))
                    continue
                if journal.save and not worker.alive and journal.summary.environment_file is None:
                    worker.start()
                    journal.environment(environment_record(worker.facts, options.settings(journal.till_first_fail)),
                                        console)
                journal.record(run_on_worker(worker, test, iterations=options.iterations, warmup=options.warmup))


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
    runner: Any = None,
    budget_s: Optional[float] = None,
) -> CampaignSummary:
    """Run `tests` on `device`, appending each result to the logs under `log_dir`; with
    `budget_s`, no test starts once this run's tests have held the device that many seconds
    (the rest is left for a later run, which resumes).

    `loader` names the function that builds a test's model in the worker
    (`module:function`; None: standalone model files, `models.load_model_file`);
    `check_models` refuses, before any test, models that loader cannot build, and
    `check_recipes` recipes the device or a test's network cannot run; `console`
    has `info`, `warn`, `print_table` and `progress` (`console.py`); `runner` runs the
    tests not yet recorded (`run_tests(todo, journal, options, console)`; None: this
    machine's device, `LocalDevice`; a lab's devices, `perf4sight.profile.lab` on the host).
    """
    check_run(iterations, warmup, memory_limit_mib, budget_s)
    backend = backend_name(device)
    log_dir = Path(log_dir)
    _check_log_names(tests)
    digests = {model: {MODEL_DIGEST: model_digest(model), SPEC_DIGEST: spec_digest(model)}
               for model in dict.fromkeys(test.model for test in tests)}
    # checked before the log folder is made or locked: a bad model is one line, nothing written
    todo = _todo(tests, _kept(_recorded(tests, log_dir, digests, repair=False), retry_failed) if save else {})
    check_models(todo)
    check_recipes(todo, import_loader(loader), BACKENDS[backend])
    options = RunOptions(backend, gpu_id, iterations, warmup, memory_limit_mib, loader,
                         log_dir / "worker.log" if save else None)
    runner = runner if runner is not None else LocalDevice()
    if not save:
        return _run(tests, {}, log_dir, options, till_first_fail, False, digests, runner, console, budget_s)
    with LogFolderLock(log_dir):
        recorded = _recorded(tests, log_dir, digests, repair=True)
        kept = _kept(recorded, retry_failed)
        if len(kept) < len(recorded):
            console.info("{} failed tests (not out of memory) run again; retry_failed off keeps them "
                         "as failed".format(len(recorded) - len(kept)))
        return _run(tests, kept, log_dir, options, till_first_fail, True, digests, runner, console, budget_s)


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


def _run(tests: Sequence[ProfileTest], recorded: Dict[tuple, LogRow], log_dir: Path, options: RunOptions,
         till_first_fail: bool, save: bool, digests: Dict[str, Dict[str, Optional[str]]], runner: Any,
         console: Any, budget_s: Optional[float]) -> CampaignSummary:
    todo = _todo(tests, recorded)
    already = len(tests) - len(todo)
    if already:
        console.info("{} of {} tests already in {}; resuming".format(already, len(tests), log_dir))
    with console.progress("profiling", total=len(todo)) as bar:
        journal = CampaignJournal(recorded, log_dir, save=save, till_first_fail=till_first_fail,
                                  digests=digests, bar=bar, budget_s=budget_s)
        journal.summary.already_recorded = already
        runner.run_tests(todo, journal, options, console)
        journal.summary.not_run = len(todo) - len(journal.summary.results)
    _report(journal.summary, log_dir if save else None, console, budget_s)
    return journal.summary


def _label(test: ProfileTest) -> str:
    return "{} bs={} {} {}".format(test.log_name, test.bs, test.stage, test.test_var)


def check_run(iterations: int, warmup: int, memory_limit_mib: Optional[int], budget_s: Optional[float] = None) -> None:
    """Refuse run settings no campaign can use (a float or a bool is no count of iterations)."""
    if not is_positive_int(iterations) or not is_int_at_least(warmup, 0):
        raise ArgumentError("iterations >= 1 and warmup >= 0 needed, integers, got {!r}, {!r}".format(
            iterations, warmup))
    if budget_s is not None and not is_positive_amount(budget_s):
        raise ArgumentError("budget: {!r} is no time budget; seconds above 0".format(budget_s))
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


def _row(result: TestResult, digests: Dict[str, Optional[str]], device: Optional[str]) -> LogRow:
    outcome = result.outcome
    memory = outcome.memory if outcome is not None else None
    params = result.test.params()
    params.update((key, digest) for key, digest in digests.items() if digest is not None)
    if device is not None:
        params[LAB_DEVICE] = device
    row: LogRow = {
        "passed": result.passed,
        "status": result.status,
        "error": outcome.error if outcome is not None else None,
        "params": params,
        "latency": result.latency_ms,
        "latency_iters_ms": outcome.latency_iters_ms if outcome is not None and outcome.latency_iters_ms else None,
        "test_s": None if result.seconds is None else round(result.seconds, 2),
    }
    if result.test.test_var == "latency" and outcome is not None:
        share = outcome.cpu_elsewhere
        row["cpu_elsewhere"] = None if share is None else round(share, 3)
    if memory is not None:
        row.update(memory._asdict())
    return row


def _report(summary: CampaignSummary, log_dir: Optional[Path], console: Any, budget_s: Optional[float]) -> None:
    console.print_table(
        "profiling summary",
        ["passed", "failed", "skipped", "already recorded", "device minutes"],
        [[summary.passed, summary.failed, summary.skipped, summary.already_recorded, summary.device_s / 60.0]],
    )
    if summary.not_run:
        console.warn("the budget of {:g} device minutes is spent ({:.1f} used): {} tests not run; run the campaign "
                     "again to go on".format((budget_s or 0.0) / 60.0, summary.device_s / 60.0, summary.not_run))
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

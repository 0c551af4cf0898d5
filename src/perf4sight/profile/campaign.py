"""A profiling campaign: every test of a test config, crash-isolated and resumable.

Tests already in the logs are skipped, so a campaign killed at any point (SIGKILL
included) picks up where it stopped when started again. With `till_first_fail`, a
failed batch size ends its model's run for that stage and variable: the larger batch
sizes are recorded as `skipped` (passed=False), which also makes a resumed campaign
skip them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from perf4sight import console
from perf4sight.config import ProfileSettings, is_positive_int
from perf4sight.errors import ConfigError
from perf4sight.profile.backends import backend_name
from perf4sight.profile.contention import BUSY_ELSEWHERE_WARNING
from perf4sight.profile.environment import environment_record, write_environment
from perf4sight.profile.logs import LogRow, append_gt_row, append_row, journal_path, read_journal, write_gt
from perf4sight.profile.test_config import ProfileTest, check_test_settings, create_test_config, read_test_config
from perf4sight.profile.worker import WorkerCrashed, WorkerProcess
from perf4sight.profile.workload import TestOutcome, model_source

__all__ = [
    "TestResult", "CampaignSummary", "check_settings", "profile_campaign", "run_test_config", "profile_from_settings",
]


@dataclass(frozen=True)
class TestResult:
    """A test of this campaign and what became of it (status: ok, error, crashed, skipped)."""

    test: ProfileTest
    status: str
    outcome: TestOutcome | None

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    @property
    def latency_ms(self) -> float | None:
        times = self.outcome.latency_iters_ms if self.outcome is not None else []
        return fmean(times) if times and self.passed else None


@dataclass
class CampaignSummary:
    """What a campaign did; `already_recorded` counts tests found in the logs and not rerun."""

    results: list[TestResult] = field(default_factory=list)
    already_recorded: int = 0
    environment_file: Path | None = None

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
    def disturbed(self) -> list[TestResult]:
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
    save: bool = True,
    memory_limit_mib: int | None = None,
) -> CampaignSummary:
    """Run `tests` on `device`, appending each result to the logs under `log_dir`."""
    _check_run(iterations, warmup, memory_limit_mib)
    backend = backend_name(device)
    log_dir = Path(log_dir)
    summary = CampaignSummary()
    recorded = _recorded(tests, log_dir) if save else {}
    failed_at: dict[tuple, int] = {}  # test group -> smallest failed batch size
    for row in recorded.values():
        if not row["passed"] and row.get("status") != "skipped":
            _note_failure(failed_at, ProfileTest.from_params(row["params"]))
    todo = [t for t in tests if t.key not in recorded]
    _check_models(todo)
    summary.already_recorded = len(tests) - len(todo)
    if summary.already_recorded:
        console.info(f"{summary.already_recorded} of {len(tests)} tests already in {log_dir}; resuming")
    if save:
        log_dir.mkdir(parents=True, exist_ok=True)
    worker = WorkerProcess(
        backend, gpu_id=gpu_id, memory_limit_mib=memory_limit_mib,
        log_path=log_dir / "worker.log" if save else None,
    )
    settings = {"device": backend, "gpu_id": gpu_id, "iterations": iterations, "warmup": warmup,
                "till_first_fail": till_first_fail, "memory_limit_mib": memory_limit_mib}
    with worker, console.progress("profiling", total=len(todo)) as bar:
        for test in todo:
            label = f"{test.log_name} bs={test.bs} {test.stage} {test.test_var}"
            bar.label(label)
            if till_first_fail and failed_at.get(test.group, test.bs + 1) < test.bs:
                result = TestResult(test, "skipped", None)
            else:
                if not worker.alive and save and summary.environment_file is None:
                    worker.start()
                    record = environment_record(worker.facts, settings)
                    summary.environment_file = write_environment(log_dir, record)
                result = _run_one(worker, test, iterations=iterations, warmup=warmup)
                if not result.passed:
                    _note_failure(failed_at, test)
                    worker.stop()  # a fresh interpreter after any failure
            summary.results.append(result)
            if save:
                path = journal_path(log_dir, test)
                row = _row(result)
                append_row(path, test.test_var, row)
                append_gt_row(path, test.test_var, row)
            bar.advance(label)
    _report(summary, log_dir if save else None)
    return summary


def _check_models(tests: Sequence[ProfileTest]) -> None:
    """Refuse a test config whose model files are missing or whose specs do not read:
    such a test would fail without measuring anything, and its failure, journalled,
    would never be retried once the file is fixed."""
    from perf4sight.networks.model_file import split_model_source
    from perf4sight.networks.spec import read_spec

    for source in dict.fromkeys(model_source(test) for test in tests):
        path = split_model_source(source)[0]
        if path.suffix not in (".py", ".json"):  # a torchvision name
            continue
        if not path.is_file():
            raise ConfigError(f"test config: model file not found: {path}")
        if path.suffix == ".json":
            read_spec(path)


def _check_run(iterations: int, warmup: int, memory_limit_mib: int | None) -> None:
    if iterations < 1 or warmup < 0:
        raise ConfigError(f"[profile] iterations >= 1 and warmup >= 0 needed, got {iterations}, {warmup}")
    if memory_limit_mib is not None and not is_positive_int(memory_limit_mib):
        raise ConfigError(f"[profile] memory_limit_mib: expected a positive integer (MiB), got {memory_limit_mib!r}")


def check_settings(settings: ProfileSettings) -> None:
    """Refuse [profile] values that would stop the section part-way (a config's earlier
    stages would have run for nothing)."""
    if settings.network and settings.create_config:
        check_test_settings(settings)
    backend_name(settings.device)
    _check_run(settings.iterations, settings.warmup, settings.memory_limit_mib)


def _elsewhere(result: TestResult) -> float:
    """The share of the CPU other processes took during a passed test (0 when unknown)."""
    if not result.passed or result.outcome is None:
        return 0.0
    return result.outcome.cpu_elsewhere or 0.0


def _note_failure(failed_at: dict[tuple, int], test: ProfileTest) -> None:
    failed_at[test.group] = min(failed_at.get(test.group, test.bs), test.bs)


def _run_one(worker: WorkerProcess, test: ProfileTest, *, iterations: int, warmup: int) -> TestResult:
    try:
        outcome = worker.run(test, iterations=iterations, warmup=warmup)
    except WorkerCrashed as exc:
        return TestResult(test, "crashed", TestOutcome(False, [], None, str(exc)))
    return TestResult(test, "ok" if outcome.passed else "error", outcome)


def _recorded(tests: Sequence[ProfileTest], log_dir: Path) -> dict[tuple, LogRow]:
    """Rows already in the logs of these tests' models, by test key (torn lines repaired)."""
    recorded: dict[tuple, LogRow] = {}
    for path in dict.fromkeys(journal_path(log_dir, t) for t in tests):
        rows = read_journal(path, repair=True)
        for row in rows:
            recorded.setdefault(ProfileTest.from_params(row["params"]).key, row)
        if rows:
            write_gt(path, path.parent.name)
    return recorded


def _row(result: TestResult) -> LogRow:
    outcome = result.outcome
    memory = outcome.memory if outcome is not None else None
    row: LogRow = {
        "passed": result.passed,
        "status": result.status,
        "error": outcome.error if outcome is not None else None,
        "params": result.test.params(),
        "latency": result.latency_ms,
        "latency_iters_ms": outcome.latency_iters_ms if outcome is not None and outcome.latency_iters_ms else None,
    }
    if result.test.test_var == "latency" and outcome is not None:
        share = outcome.cpu_elsewhere
        row["cpu_elsewhere"] = None if share is None else round(share, 3)
    if memory is not None:
        row.update(dataclasses.asdict(memory))
    return row


def _report(summary: CampaignSummary, log_dir: Path | None) -> None:
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
            f"{len(disturbed)} of {timed} latency tests ran while other processes took "
            f"{BUSY_ELSEWHERE_WARNING:.0%} or more of the CPU (most: {_elsewhere(worst):.0%}, "
            f"{worst.test.log_name} bs={worst.test.bs} {worst.test.stage}); their latencies may be too long: "
            "profile on an otherwise idle machine"
        )
    if log_dir is not None:
        console.info(f"logs in {log_dir}")


def run_test_config(settings: ProfileSettings) -> CampaignSummary:
    """Run the test config named by `settings.test_config` with the [profile] run keys."""
    return profile_campaign(
        read_test_config(settings.test_config),
        log_dir=settings.log_dir,
        device=settings.device,
        gpu_id=settings.gpu_id,
        iterations=settings.iterations,
        warmup=settings.warmup,
        till_first_fail=settings.till_first_fail,
        save=settings.save,
        memory_limit_mib=settings.memory_limit_mib,
    )


def profile_from_settings(settings: ProfileSettings) -> CampaignSummary | None:
    """The [profile] section: create the test config when it lists networks and `create_config`
    is on (the host's half), then run it when `run_profiling` is on (the device's half)."""
    if settings.network and settings.create_config:
        path = create_test_config(settings)
        console.info(f"test config written to {path}")
    return run_test_config(settings) if settings.run_profiling else None

"""The worker process that runs tests, and the campaign's handle on it.

Tests run in a separate interpreter so that one that kills it (a segfault, the kernel's
OOM killer, the memory-limit watchdog) costs one result, not the campaign. The worker is
reused from test to test and started afresh after a failure. Requests go in on stdin and
results come back as JSON lines on a pipe of their own, so that whatever a model prints
(stdout and stderr go to a log file) cannot garble them.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import psutil

from perf4sight.errors import ConfigError, Perf4sightError
from perf4sight.profile.memory import BYTES_PER_MIB
from perf4sight.profile.test_config import ProfileTest
from perf4sight.profile.workload import TestOutcome

__all__ = ["WorkerProcess", "WorkerCrashed", "MemoryLimitExceeded", "main"]

_POLL_S = 0.02
_START_TIMEOUT_S = 600.0
_ENTRY = "import sys; from perf4sight.profile.worker import main; sys.exit(main(sys.argv[1:]))"


class WorkerCrashed(RuntimeError):
    """The worker died (or was killed) before answering."""


class MemoryLimitExceeded(WorkerCrashed):
    """The watchdog killed the worker for going over memory_limit_mib."""


class WorkerProcess:
    """A running worker for one backend; `run(test)` returns the test's outcome."""

    def __init__(
        self,
        device: str,
        *,
        gpu_id: int = 0,
        memory_limit_mib: int | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.options = {"device": device, "gpu_id": gpu_id}
        self.memory_limit_mib = memory_limit_mib
        self.log_path = log_path
        self.facts: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._results: IO[bytes] | None = None
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> dict[str, Any]:
        """Start the worker and wait until its device is ready; returns its facts.

        A worker that dies or hangs before its first test is no test's failure and would
        fail the same way for every test, so it is a ConfigError naming the likely key.
        """
        read_fd, write_fd = os.pipe()
        log = open(self.log_path, "ab") if self.log_path is not None else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY,
                 "--options", json.dumps(self.options), "--result-fd", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)
            if log is not subprocess.DEVNULL:
                log.close()
        self._results = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        try:
            reply = self._receive(timeout_s=_START_TIMEOUT_S)
        except WorkerCrashed as exc:
            raise ConfigError(self._start_failure(exc)) from None
        if "fatal" in reply:
            self.stop()
            raise ConfigError(reply["fatal"])
        self.facts = reply["facts"]
        return self.facts

    def run(self, test: ProfileTest, *, iterations: int, warmup: int) -> TestOutcome:
        """Run one test; raises WorkerCrashed when the worker dies meanwhile (ConfigError
        when a fresh one cannot start, see `start`)."""
        if not self.alive:
            self.start()
        request = {"test": asdict(test), "iterations": iterations, "warmup": warmup}
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerCrashed(self._death_reason()) from None
        return TestOutcome.from_json(self._receive(timeout_s=None))

    def _receive(self, *, timeout_s: float | None) -> dict[str, Any]:
        """The next result line, watching the worker's life and memory meanwhile."""
        assert self._proc is not None and self._results is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._results], [], [], _POLL_S)
            if ready:
                chunk = self._results.read(65536)
                if not chunk:
                    self._proc.wait()
                    raise WorkerCrashed(self._death_reason())
                self._buffer += chunk
                continue
            if self._proc.poll() is not None:
                raise WorkerCrashed(self._death_reason())
            self._watch_memory()
            if deadline is not None and time.monotonic() > deadline:
                self.stop()
                raise WorkerCrashed(f"no answer within {timeout_s:g} s")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _start_failure(self, exc: WorkerCrashed) -> str:
        if isinstance(exc, MemoryLimitExceeded):
            return (
                f"[profile] memory_limit_mib = {self.memory_limit_mib}: the worker went over it while "
                f"starting, before any test ({exc}); the limit must leave room for Python and torch"
            )
        output = f"; its output is in {self.log_path}" if self.log_path is not None else ""
        return f"[profile] device = {self.options['device']}: the worker could not start: {exc}{output}"

    def _watch_memory(self) -> None:
        if self.memory_limit_mib is None or self._proc is None:
            return
        try:
            rss_mib = psutil.Process(self._proc.pid).memory_info().rss / BYTES_PER_MIB
        except psutil.Error:
            return
        if rss_mib > self.memory_limit_mib:
            self._proc.kill()
            self._proc.wait()
            self.stop()
            raise MemoryLimitExceeded(
                f"worker killed: resident memory {rss_mib:.0f} MiB over memory_limit_mib "
                f"{self.memory_limit_mib}"
            )

    def _death_reason(self) -> str:
        code = self._proc.wait() if self._proc is not None else None
        self.stop()
        if code is not None and code < 0:
            try:
                return f"worker died: {signal.Signals(-code).name}"
            except ValueError:
                return f"worker died: signal {-code}"
        return f"worker died: exit code {code}"

    def stop(self) -> None:
        """End the worker (politely: closing stdin ends its loop) and close the pipes."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    proc.kill()
                    proc.wait()
            elif proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        if self._results is not None:
            self._results.close()
            self._results = None

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _exit_with_parent() -> None:
    """End this process as soon as the campaign that started it is gone (killed, or
    stopped by a signal it could not handle): a test left running would take the device
    from the next campaign's measurements."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """The worker's loop: set up the backend, then one request in, one result out."""
    parser = argparse.ArgumentParser(prog="perf4sight-worker")
    parser.add_argument("--options", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    _exit_with_parent()
    options = json.loads(args.options)
    with os.fdopen(args.result_fd, "w", buffering=1) as results:
        from perf4sight.profile.backends import make_backend
        from perf4sight.profile.workload import run_test

        try:
            backend = make_backend(options["device"], gpu_id=options["gpu_id"])
            facts = backend.setup()
        except Perf4sightError as exc:
            results.write(json.dumps({"fatal": str(exc)}) + "\n")
            return 2
        except Exception as exc:  # a driver or library that fails to start: the device's setup
            message = f"[profile] device = {options['device']}: cannot set up: {type(exc).__name__}: {exc}"
            results.write(json.dumps({"fatal": message}) + "\n")
            return 2
        results.write(json.dumps({"facts": facts}) + "\n")
        for line in sys.stdin:
            request = json.loads(line)
            outcome = run_test(
                ProfileTest(**request["test"]), backend,
                iterations=request["iterations"], warmup=request["warmup"],
            )
            results.write(json.dumps(outcome.to_json()) + "\n")
    return 0

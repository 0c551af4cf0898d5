"""The worker process that runs tests, and the campaign's handle on it.

Tests run in a separate interpreter so that one that kills it (a segfault, the kernel's
OOM killer, the memory-limit watchdog) costs one result, not the campaign. The worker is
reused from test to test and started afresh after a failure. Requests go in on stdin and
results come back as JSON lines on a pipe of their own, so that whatever a model prints
(stdout and stderr go to a log file) cannot garble them.
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Dict, List, Optional

from .errors import ArgumentError, Perf4sightError
from .system import rss_mib
from .test_config import ProfileTest

if TYPE_CHECKING:
    from .workload import TestOutcome

__all__ = ["WorkerProcess", "WorkerCrashed", "MemoryLimitExceeded", "main"]

_POLL_S = 0.02
_START_TIMEOUT_S = 600.0
# This package imported by its own name from the folder that holds it: `perf4sight.device`
# on the host, the bundle's top-level copy on a device.
_PACKAGE = __name__.rpartition(".")[0]
_ROOT = str(Path(__file__).resolve().parents[len(_PACKAGE.split("."))])
_ENTRY = "import sys; sys.path.insert(0, {!r}); from {}.worker import leave, main; leave(main(sys.argv[1:]))".format(
    _ROOT, _PACKAGE)


class WorkerCrashed(RuntimeError):
    """The worker died (or was killed) before answering."""


class MemoryLimitExceeded(WorkerCrashed):
    """The watchdog killed the worker for going over memory_limit_mib."""


class WorkerProcess:
    """A running worker for one backend; `run(test)` returns the test's outcome. Its models
    are built by `loader` (`module:function`, see `models.import_loader`)."""

    def __init__(
        self,
        device: str,
        *,
        gpu_id: int = 0,
        memory_limit_mib: Optional[int] = None,
        log_path: Optional[Path] = None,
        loader: Optional[str] = None,
    ) -> None:
        self.options = {"device": device, "gpu_id": gpu_id, "loader": loader}
        self.memory_limit_mib = memory_limit_mib
        self.log_path = log_path
        self.facts: Dict[str, Any] = {}
        self.tests_run = 0  # by this interpreter: a memory test needs one that has run none
        self._proc: Optional[subprocess.Popen] = None
        self._results: Optional[IO[bytes]] = None
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Dict[str, Any]:
        """Start the worker and wait until its device is ready; returns its facts, those of its
        first start (a restart, as for each memory test, skips the device's probes).

        A worker that dies or hangs before its first test is no test's failure and would
        fail the same way for every test, so it is an ArgumentError naming the likely key.
        """
        read_fd, write_fd = os.pipe()
        log = open(str(self.log_path), "ab") if self.log_path is not None else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY,
                 "--options", json.dumps(dict(self.options, measure=not self.facts)), "--result-fd", str(write_fd)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)
            if log is not subprocess.DEVNULL:
                log.close()
        self._results = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self.tests_run = 0
        try:
            reply = self._receive(timeout_s=_START_TIMEOUT_S)
        except WorkerCrashed as exc:
            raise ArgumentError(self._start_failure(exc)) from None
        if "fatal" in reply:
            self.stop()
            raise ArgumentError(reply["fatal"])
        self.facts = self.facts or reply["facts"]
        return self.facts

    def run(self, test: ProfileTest, *, iterations: int, warmup: int) -> "TestOutcome":
        """Run one test; raises WorkerCrashed when the worker dies meanwhile (ArgumentError
        when a fresh one cannot start, see `start`)."""
        from .workload import TestOutcome  # imports torch: not at the top, see `main`

        if not self.alive:
            self.start()
        request = {"test": test.params(), "iterations": iterations, "warmup": warmup}
        assert self._proc is not None and self._proc.stdin is not None
        self.tests_run += 1
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerCrashed(self._death_reason()) from None
        return TestOutcome.from_json(self._receive(timeout_s=None))

    def _receive(self, *, timeout_s: Optional[float]) -> Dict[str, Any]:
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
                raise WorkerCrashed("no answer within {:g} s".format(timeout_s))
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line.decode("utf-8"))

    def _start_failure(self, exc: WorkerCrashed) -> str:
        if isinstance(exc, MemoryLimitExceeded):
            return (
                "memory_limit_mib = {}: the worker went over it while starting, before any "
                "test ({}); the limit must leave room for Python and torch".format(self.memory_limit_mib, exc)
            )
        output = "; its output is in {}".format(self.log_path) if self.log_path is not None else ""
        return "device = {}: the worker could not start: {}{}".format(self.options["device"], exc, output)

    def _watch_memory(self) -> None:
        if self.memory_limit_mib is None or self._proc is None:
            return
        resident = rss_mib(self._proc.pid)
        if resident is not None and resident > self.memory_limit_mib:
            self._proc.kill()
            self._proc.wait()
            self.stop()
            raise MemoryLimitExceeded(
                "worker killed: resident memory {:.0f} MiB over memory_limit_mib {}".format(
                    resident, self.memory_limit_mib)
            )

    def _death_reason(self) -> str:
        code = self._proc.wait() if self._proc is not None else None
        self.stop()
        if code is not None and code < 0:
            try:
                return "worker died: {}".format(signal.Signals(-code).name)
            except ValueError:
                return "worker died: signal {}".format(-code)
        return "worker died: exit code {}".format(code)

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

    def __enter__(self) -> "WorkerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
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


def _import_training_runtime() -> None:
    """Import what a training script's process holds before it builds its model: from PyTorch
    2.0 the first optimizer step (or importing torchvision) loads `torch._dynamo`, about
    150 MiB of modules, which a memory test must not charge to the network it measures,
    whether its model comes from a standalone file (torch only) or through torchvision."""
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:  # PyTorch before 2.0: nothing of the kind
        pass


def leave(code: int) -> None:
    """End the worker without the interpreter's teardown of torch (about 0.9 s on a 2-core VM,
    paid by every memory test's worker and waited for by the campaign): its results and log are
    flushed, and nothing else of it outlives the process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    """The worker's loop: set up the backend, then one request in, one result out.

    The parent is watched before torch is imported (seconds on a busy machine or a Jetson),
    so that a campaign killed meanwhile does not leave its worker starting up."""
    parser = argparse.ArgumentParser(prog="perf4sight-worker")
    parser.add_argument("--options", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    args = parser.parse_args(argv)
    _exit_with_parent()
    options = json.loads(args.options)
    with os.fdopen(args.result_fd, "w", buffering=1) as results:
        from .backends import make_backend
        from .models import import_loader
        from .workload import run_test

        _import_training_runtime()

        try:
            load = import_loader(options.get("loader"))
            backend = make_backend(options["device"], gpu_id=options["gpu_id"])
            facts = backend.setup(measure=options["measure"])
        except Perf4sightError as exc:
            results.write(json.dumps({"fatal": str(exc)}) + "\n")
            return 2
        except Exception as exc:  # a driver or library that fails to start: the device's setup
            message = "device = {}: cannot set up: {}: {}".format(options["device"], type(exc).__name__, exc)
            results.write(json.dumps({"fatal": message}) + "\n")
            return 2
        results.write(json.dumps({"facts": facts}) + "\n")
        for line in sys.stdin:
            request = json.loads(line)
            outcome = run_test(
                ProfileTest.from_params(request["test"]), backend, load,
                iterations=request["iterations"], warmup=request["warmup"],
            )
            results.write(json.dumps(outcome.to_json()) + "\n")
    return 0

"""One device of a lab: what `perf4sight.profile.lab` runs, as a Ray actor, on the device's node.

It holds the device's worker and runs the tests sent to it one at a time, as a campaign on the
device itself would (`campaign.run_on_worker`). It imports nothing of Ray or of the host's
perf4sight: the node needs the device package and PyTorch, as a bundle does, besides Ray.
"""

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from .campaign import RunOptions, TestResult, run_on_worker
from .environment import environment_record
from .errors import ArgumentError
from .test_config import ProfileTest

__all__ = ["LabDevice"]


class LabDevice:
    """The device `name` of a lab. With `cores`, it and its worker run on those CPU cores
    only (the worker inherits the affinity, and PyTorch's thread pools size themselves to
    it): two CPU devices on one host each take their share."""

    def __init__(self, name: str, options: RunOptions, settings: Dict[str, Any],
                 cores: Optional[Sequence[int]] = None) -> None:
        if cores:
            if not hasattr(os, "sched_setaffinity"):
                raise ArgumentError("devices: {} names CPU cores, which this system cannot assign".format(name))
            os.sched_setaffinity(0, set(cores))
        self.name = name
        self.settings = dict(settings, lab_device=name, cores=list(cores) if cores else None)
        # the worker's output stays on the device's node: the campaign's log folder is the driver's
        log_path = Path(tempfile.gettempdir()) / "perf4sight-lab-{}-worker.log".format(name)
        self.options = options._replace(log_path=log_path)
        self.worker = self.options.worker()

    def environment(self) -> Dict[str, Any]:
        """Start the worker; the environment record of this device (ArgumentError when its
        worker cannot start, as on the device itself)."""
        if not self.worker.alive:
            self.worker.start()
        return environment_record(self.worker.facts, self.settings)

    def run(self, test: ProfileTest) -> TestResult:
        return run_on_worker(self.worker, test, iterations=self.options.iterations, warmup=self.options.warmup)

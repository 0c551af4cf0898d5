"""A campaign over a lab's devices on Ray: the same test config and the same logs as on one device.

A device is a Ray resource: each device's node is started with a custom resource of its
own (`ray start --resources '{"orin": 1}'`; a server's GPUs with `--num-gpus`, or the
resource `GPU`), and `[profile] devices` names the resources of one device kind. Each unit
of those resources runs a `LabDevice` actor (`perf4sight.device.lab`) that holds it, so one
test at a time runs on each device, and the driver (this process) hands the next test to
whichever device is free: eight identical GPUs take an eighth of one's time. Campaigns for
other kinds are other drivers, on their own log folders, at the same time.

The driver alone writes the logs, through the campaign's journal (`CampaignJournal`), in
the log folder it locks: a second driver on the same logs is refused, one row per test as
its result arrives (the lab's device that ran it in the journal's `params`, `lab_device`),
and each device's environment record beside them. A driver killed at any point loses
only the tests in flight (Ray ends its actors, their workers follow), which the next run
resumes. A device lost mid-test (its actor's process or node died) is started again, and
the test is retried once, on another device where there is one; lost twice, it is
recorded as crashed, with the reason.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perf4sight.device.backends import BACKENDS
from perf4sight.device.campaign import CampaignJournal, RunOptions, TestResult
from perf4sight.device.lab import LabDevice
from perf4sight.device.test_config import ProfileTest
from perf4sight.errors import ArgumentError, Perf4sightError

__all__ = ["RAY_MISSING", "Lab", "DeviceResource", "check_cluster", "parse_devices"]

RAY_MISSING = "profiling on a cluster needs Ray, an extra of perf4sight: pip install 'perf4sight[ray]'"
# Ray's own resource for a node's GPUs: a device per GPU, as `num_gpus=1`.
GPU_RESOURCE = "GPU"
_DEVICE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)(?::([0-9]+)(?:-([0-9]+))?)?$")
# How long to wait for a device with nothing running (its node may be gone), and how often a
# device lost mid-test is started again before the campaign goes on without it.
WAIT_S = 300.0
REPLACEMENTS = 3
# How long a head's address may take to accept a connection.
REACH_S = 10.0


@dataclass(frozen=True)
class DeviceResource:
    """An entry of `[profile] devices`: a Ray resource, and the CPU cores its device runs on."""

    name: str
    cores: tuple[int, ...] | None = None


def parse_devices(items: Sequence[str]) -> list[DeviceResource]:
    """`name` or `name:core` or `name:first-last` per device resource; ArgumentError naming the
    bad item."""
    if not items:
        raise ArgumentError("devices: name the Ray resource of each device of this campaign's kind "
                         "(a node started with `ray start --resources '{\"orin\": 1}'`: devices = orin)")
    parsed = []
    for item in items:
        match = _DEVICE.match(str(item).strip())
        if match is None:
            raise ArgumentError(f"devices: {item!r} is not a Ray resource name, optionally with CPU cores "
                             "(cpu_a, cpu_a:0 or cpu_a:0-3)")
        name, first, last = match.groups()
        cores = None if first is None else tuple(range(int(first), int(last if last is not None else first) + 1))
        if cores == ():
            raise ArgumentError(f"devices: {item!r}: no cores from {first} to {last}")
        parsed.append(DeviceResource(name, cores))
    names = [device.name for device in parsed]
    twice = [name for name in names if names.count(name) > 1]
    if twice:
        raise ArgumentError(f"devices: {twice[0]} is named twice")
    return parsed


def check_cluster(cluster: str | None, devices: Sequence[str]) -> None:
    """Refuse, before anything runs, a cluster campaign that cannot start: Ray missing, no
    device resources, or no head at the address (ArgumentError, one line)."""
    if cluster is None:
        return
    if not cluster.strip():
        raise ArgumentError("cluster: empty; give auto (the cluster this machine belongs to) or its address")
    if not _ray_installed():
        raise ArgumentError(RAY_MISSING)
    parse_devices(devices)
    _check_reachable(cluster.strip())


def _check_reachable(address: str) -> None:
    """Refuse a head's address where nothing answers, in seconds (Ray itself retries for minutes)."""
    if address == "auto":
        return  # Ray finds the cluster this machine belongs to, or says at once that there is none
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=REACH_S):
            pass
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"cluster = {address}: no Ray head answers there ({exc}); give auto or the address "
                            "`ray start --head` printed (host:port)") from None


def _ray_installed() -> bool:
    """Whether Ray can be imported, found without importing it (a second)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


class _Device:
    """A device of the campaign: its actor, and how often it was started again."""

    def __init__(self, label: str, resource: DeviceResource) -> None:
        self.label = label
        self.resource = resource
        self.actor: Any = None
        self.replaced = 0


class Lab:
    """The runner of a campaign on a Ray cluster's devices (`profile_campaign(runner=...)`):
    `address` is `auto` (the cluster this machine belongs to) or the head's address."""

    def __init__(self, address: str, devices: Sequence[str], *, wait_s: float = WAIT_S) -> None:
        check_cluster(address, devices)
        self.address = address.strip()
        self.resources = parse_devices(devices)
        self.wait_s = wait_s

    def run_tests(self, todo: Sequence[ProfileTest], journal: CampaignJournal, options: RunOptions,
                  console: Any) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ArgumentError(f"{RAY_MISSING} ({exc})") from None
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ArgumentError(f"cluster = {self.address}: cannot join the Ray cluster ({' '.join(str(exc).split())}); "
                                "start it with `ray start --head` (and each device's node with `ray start "
                                "--address`)") from None
        try:
            _Dispatch(ray, self._devices(ray), todo, journal, options, console, self.wait_s).run()
        finally:
            ray.shutdown()

    def _devices(self, ray: Any) -> list[_Device]:
        """A device per unit of each resource the cluster has (`<name>-<i>` where there are several)."""
        capacity = ray.cluster_resources()
        devices = []
        for resource in self.resources:
            units = int(capacity.get(resource.name, 0))
            if units == 0:
                raise ArgumentError(
                    f"devices: the cluster at {self.address} has no resource {resource.name!r} (it has: "
                    f"{', '.join(sorted(k for k in capacity if not k.startswith('node:'))) or 'none'}); start each "
                    f"device's node with `ray start --resources '{{\"{resource.name}\": 1}}'`")
            if resource.cores and units > 1:
                raise ArgumentError(f"devices: {resource.name} names CPU cores, and the cluster has {units} of it; "
                                    "give each device a resource of its own")
            devices += [_Device(resource.name if units == 1 else f"{resource.name}-{unit}", resource)
                        for unit in range(units)]
        return devices


class _Dispatch:
    """One run of a lab campaign: hands each test to a free device, records each result."""

    def __init__(self, ray: Any, devices: list[_Device], todo: Sequence[ProfileTest], journal: CampaignJournal,
                 options: RunOptions, console: Any, wait_s: float) -> None:
        self.ray = ray
        self.journal = journal
        self.options = options
        self.console = console
        self.wait_s = wait_s
        self.gpu = BACKENDS[options.backend].gpu
        self.queue: deque[tuple[ProfileTest, str | None]] = deque((test, None) for test in todo)  # test, device that lost it
        self.idle: list[_Device] = []
        self.starting: dict[Any, _Device] = {}  # environment call -> device
        self.running: dict[Any, tuple[_Device, ProfileTest, str | None]] = {}
        for device in devices:
            self._start(device)

    def run(self) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        while (self.queue and not self.journal.spent) or self.running:
            self._dispatch()
            if not self.running and not self.starting:
                raise ArgumentError("devices: no device of this campaign is left; the logs are kept, run it "
                                    "again to resume")
            ready, _ = self.ray.wait(list(self.running) + list(self.starting), num_returns=1,
                                     timeout=None if self.running else self.wait_s)
            if not ready:
                raise ArgumentError(f"devices: no device answered within {self.wait_s:g} s (their nodes gone?); "
                                    "the logs are kept, run it again to resume")
            (ref,) = ready
            device, test, lost_on = self.running.pop(ref) if ref in self.running else (self.starting.pop(ref), None, None)
            try:
                value = self.ray.get(ref)
            except RayActorError as exc:
                self._lost(device, test, lost_on, exc)
                continue
            except RayTaskError as exc:  # the device's own error (its worker cannot start): one line, named
                if isinstance(exc.cause, Perf4sightError):
                    raise type(exc.cause)(f"{device.label}: {exc.cause}") from None
                raise
            if test is None:
                self.journal.environment(value, self.console, device=device.label)
            else:
                self.journal.record(value, device=device.label)
            self.idle.append(device)

    def _start(self, device: _Device) -> None:
        resource = device.resource
        if resource.name == GPU_RESOURCE:
            placement: dict[str, Any] = {"num_gpus": 1}
        else:
            placement = {"resources": {resource.name: 1}, "num_gpus": 1 if self.gpu else 0}
        # with a GPU of its own, the actor sees it alone (CUDA_VISIBLE_DEVICES): device 0
        options = self.options._replace(gpu_id=0) if placement["num_gpus"] else self.options
        actor_class = self.ray.remote(LabDevice).options(num_cpus=0, max_restarts=0, **placement)
        settings = options.settings(self.journal.till_first_fail)
        device.actor = actor_class.remote(device.label, options, settings, resource.cores)
        self.starting[device.actor.environment.remote()] = device

    def _lost(self, device: _Device, test: ProfileTest | None, lost_on: str | None, exc: Exception) -> None:
        """A device's actor died (its process or node): retry its test once, and start the device
        again (up to REPLACEMENTS times)."""
        if test is not None and lost_on is None:
            self.console.warn(f"{device.label}: lost while running {test.log_name} bs={test.bs} {test.test_var}; "
                              "run again on the next free device")
            self.queue.appendleft((test, device.label))
        elif test is not None:
            reason = " ".join(str(exc).split())[:300]
            lost = TestResult.crashed(test, f"device lost twice ({lost_on}, then {device.label}): {reason}")
            self.journal.record(lost, device=device.label)
        device.actor = None
        if device.replaced < REPLACEMENTS:
            device.replaced += 1
            self._start(device)
        else:
            self.console.warn(f"{device.label}: lost {REPLACEMENTS + 1} times; the campaign goes on without it")

    def _dispatch(self) -> None:
        """Give each free device the next test it may run: the first in the queue, but not a
        test this device lost while another device is free, nor, under till_first_fail, a test
        of a group that has one running (its smaller batch size may fail). Tests an earlier
        failure leaves out are recorded as skipped on the way; none once the budget is spent."""
        while self.queue and not self.journal.spent:
            busy = {test.group for _, test, _ in self.running.values()} if self.journal.till_first_fail else set()
            choice = next(((device, index) for device in self.idle for index, (test, lost_on) in enumerate(self.queue)
                           if test.group not in busy
                           and (lost_on != device.label or all(other.label == lost_on for other in self.idle))), None)
            if choice is None:
                return
            device, index = choice
            test, lost_on = self.queue[index]
            del self.queue[index]
            self.journal.started(test)
            if self.journal.skips(test):
                self.journal.record(TestResult(test, "skipped", None))
                continue
            self.idle.remove(device)
            self.running[device.actor.run.remote(test)] = (device, test, lost_on)

"""A Ray cluster on this machine for the lab's tests and benchmark: a head whose custom
resources stand for devices, stopped with every process it started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil


@contextlib.contextmanager
def local_cluster(resources: dict[str, int], *, cpus: int = 2) -> Iterator[str]:
    """A Ray head with `resources` (a device each unit); yields its address."""
    import ray

    temp = tempfile.mkdtemp(prefix="p4s-ray-", dir="/tmp")  # Ray's sockets need a short path
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    listed = "{" + ", ".join(f'"{name}": {units}' for name, units in resources.items()) + "}"
    head = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--port", str(port),
         "--num-cpus", str(cpus), "--resources", listed, "--include-dashboard=false", "--disable-usage-stats",
         "--temp-dir", temp, "--object-store-memory", str(100 * 2**20)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"{ray.util.get_node_ip_address()}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if head.poll() is not None:
                raise RuntimeError("the Ray head did not start")
            try:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
                break
            except (ConnectionError, RuntimeError):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Ray head did not answer") from None
                time.sleep(0.5)
        ray.shutdown()
        yield address
    finally:
        for pid in psutil.pids():  # the head and every process it started (its session)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(pid) == head.pid:
                    os.kill(pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)

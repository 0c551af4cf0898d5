"""What runs on the device being profiled: tests, worker, backends, logs, campaign.

Written once in the subset of Python and PyTorch that the oldest supported device stack
has (Python 3.6 and PyTorch 1.8; a Jetson on JetPack 4.6 has Python 3.6 and PyTorch 1.10,
the oldest stack tested), with only the standard library and torch (psutil, NVML and
torchvision are used where present). Modules import each other relatively and nothing of
the host, so the same files run as `perf4sight.device` under `perf4sight profile run` and,
copied by `perf4sight profile bundle`, as the top-level package of a bundle on a device
where perf4sight is not installed.

This module imports nothing, so that the host can read the workload's names
(`definitions`), the log layout or the test config rules without importing torch.
"""

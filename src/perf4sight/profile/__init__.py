"""Profiling on the host: make the test config, run it, or bundle it for a device.

The code that runs on the device (tests, worker, backends, logs, campaign) is
`perf4sight.device`, the same files a bundle carries. Here: `create_test_config` lists
the tests of a [profile] section, `profile_campaign` runs them with the host's model
loader (specs, torchvision names), `profile_from_settings` does both, and
`write_bundle` writes what a device without perf4sight needs to run them.
"""

from perf4sight.device.backends import BACKENDS, DEVICE_ALIASES, MemoryFigures, make_backend
from perf4sight.device.campaign import CampaignSummary, TestResult
from perf4sight.device.logs import read_journal
from perf4sight.device.definitions import DATASETS
from perf4sight.device.test_config import ProfileTest, read_test_config
from perf4sight.profile.bundle import write_bundle
from perf4sight.profile.campaign import profile_campaign, profile_from_settings, run_test_config
from perf4sight.profile.test_config import create_test_config

__all__ = [
    "DEVICE_ALIASES",
    "BACKENDS",
    "DATASETS",
    "CampaignSummary",
    "MemoryFigures",
    "ProfileTest",
    "TestResult",
    "create_test_config",
    "make_backend",
    "profile_campaign",
    "profile_from_settings",
    "read_journal",
    "read_test_config",
    "run_test_config",
    "write_bundle",
]

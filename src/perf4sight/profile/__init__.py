"""Profiling: run training and inference iterations on a device and log memory and latency.

`create_test_config` lists the tests (on the host), `profile_campaign` runs them in a
reusable worker process through a device backend (cpu, cuda, jetson) and appends one
row per test to the logs; `profile_from_settings` does both for a [profile] section.
"""

from perf4sight.profile.backends import DEVICE_ALIASES, BACKENDS, MemoryFigures, make_backend
from perf4sight.profile.campaign import (
    CampaignSummary,
    TestResult,
    profile_campaign,
    profile_from_settings,
    run_test_config,
)
from perf4sight.profile.logs import read_journal
from perf4sight.profile.test_config import DATASETS, ProfileTest, create_test_config, read_test_config

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
]

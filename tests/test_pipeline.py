"""The pipeline: one settings check per stage, and errors placed in their file and section."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf4sight.config import SECTIONS, FingerprintSettings, NetworkDatasetSettings, ProfileSettings
from perf4sight.device.test_config import read_test_config
from perf4sight.errors import ArgumentError, ConfigError, in_settings
from perf4sight.pipeline import STAGE_CHECKS, check_section


@pytest.mark.parametrize(("name", "settings", "message"), [
    ("create_network_dataset", NetworkDatasetSettings(networks=[]), "networks: no network given"),
    ("profile", ProfileSettings(device="tpu"), "device: unknown device 'tpu'"),
    ("profile", ProfileSettings(network=["resnet18"], local_model_loc=Path("m"), optimizer=["lion"]),
     "optimizer: unknown value 'lion'"),
    ("profile", ProfileSettings(network=["resnet18"], local_model_loc=Path("m"), trainable=["layer9"]),
     "trainable: no layer 'layer9' in resnet18"),
    ("fingerprint", FingerprintSettings(train_nets=["resnet18"], train_logs=[0], pruned_models_storedir=Path("s"),
                                        model_storedir=Path("m"), stage="tarining"),
     "stage: 'tarining' is not one of training, inference"),
])
def test_each_stage_has_one_check_that_names_the_key_and_the_caller_adds_where(name, settings, message):
    assert name in SECTIONS
    with pytest.raises(ArgumentError) as info:
        check_section(name, settings)
    assert str(info.value).startswith(message)
    with pytest.raises(ConfigError) as placed:
        with in_settings(f"config.ini: [{name}]"):
            check_section(name, settings)
    assert str(placed.value).startswith(f"config.ini: [{name}] {message}")


def test_an_error_that_names_its_own_file_is_not_placed_in_a_section(tmp_path):
    """A test config's error already names that file, section and key: `in_settings` leaves it be."""
    path = tmp_path / "t.ini"
    path.write_text("[tinynet]\ntest_var = ['memory']\nbs = [0]\ndataset = ['cifar10']\nnet_name = ['tinynet']\n"
                    "exec_stage = ['training']\nmodel = ['tinynet_0.py']\n")
    with pytest.raises(ConfigError, match=rf"^{path} \[tinynet\] bs: expected positive integers, got 0$"):
        with in_settings("config.ini: [profile]"):
            read_test_config(path)


def test_every_section_has_its_stage_check():
    assert set(STAGE_CHECKS) == set(SECTIONS)

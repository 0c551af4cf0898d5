"""create_network_dataset: specs, model files and a manifest for every network and level."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from perf4sight.cli import main
from perf4sight.config import NetworkDatasetSettings
from perf4sight.errors import ConfigError, NetworkError
from perf4sight.networks import build_from_spec, create_network_dataset, load_network, read_spec


def _settings(tmp_path, **changes) -> NetworkDatasetSettings:
    base = NetworkDatasetSettings(
        networks=["resnet18", "squeezenet"], pruning_perc=[0, 50], input_size=[3, 32, 32],
        num_classes=10, model_path=tmp_path / "models",
    )
    return dataclasses.replace(base, **changes)


def test_a_spec_that_differs_from_the_one_at_its_path_is_replaced_only_with_overwrite(tmp_path):
    create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[50]))
    path = tmp_path / "models" / "squeezenet1_1_50.json"
    before = path.read_bytes()
    create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[50]))  # the same spec again
    for change in ({"input_size": [3, 64, 64]}, {"seed": 1}, {"num_classes": 100}):
        with pytest.raises(NetworkError, match=r"squeezenet1_1_50\.json: a different spec is there \(.*overwrite"):
            create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[50], **change))
        assert path.read_bytes() == before
    create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[50], seed=1, overwrite=True))
    assert read_spec(path)["params"] != json.loads(before)["params"]


def test_a_spec_that_names_its_network_with_a_path_writes_nothing_outside_the_folder(tmp_path):
    create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[0]))
    spec = json.loads((tmp_path / "models" / "squeezenet1_1_0.json").read_text())
    for net in ("../escaped", "a/b", "..", ".hidden", "c:\\x"):
        source = tmp_path / f"source_{len(net)}.json"
        source.write_text(json.dumps({**spec, "net": net}))
        with pytest.raises(NetworkError, match="no file name"):
            create_network_dataset(_settings(tmp_path, networks=[str(source)], pruning_perc=[10],
                                             model_path=tmp_path / "inner" / "out"))
    assert not list(tmp_path.rglob("escaped*")) and not list((tmp_path / "inner").rglob("*.json"))


def test_specs_and_manifest(tmp_path, layer_shapes):
    settings = _settings(tmp_path, write_model_files=True)
    manifest = create_network_dataset(settings)
    assert list(manifest.columns) == [
        "name", "network", "target_level", "level_reached", "params", "macs", "spec_file",
    ]
    assert list(manifest["name"]) == ["resnet18_0", "resnet18_50", "squeezenet_0", "squeezenet_50"]
    assert (abs(manifest["level_reached"] - manifest["target_level"]) <= 1).all()
    pd.testing.assert_frame_equal(pd.read_csv(settings.model_path / "manifest.csv"), manifest, check_dtype=False)
    for row in manifest.itertuples():
        spec = read_spec(settings.model_path / f"{row.name}.json")
        assert (spec["name"], spec["net"], spec["prune_level"], spec["params"]) == (row.name, row.network, row.target_level, row.params)
        assert spec["input_size"] == [3, 32, 32] and spec["num_classes"] == 10
        from_spec = build_from_spec(spec, device="meta")
        from_file = load_network(settings.model_path / f"{row.name}.py").module
        assert sum(p.numel() for p in from_spec.parameters()) == row.params
        assert layer_shapes(from_file) == layer_shapes(from_spec)
    squeezenet = read_spec(settings.model_path / "squeezenet_50.json")
    assert (squeezenet["torchvision"], squeezenet["torchvision_kwargs"]) == ("squeezenet1_0", {})


def test_same_seed_same_specs_and_l1_norm_mode(tmp_path):
    first = create_network_dataset(_settings(tmp_path / "a", networks=["mobilenetv2"], pruning_perc=[30]))
    again = create_network_dataset(_settings(tmp_path / "b", networks=["mobilenetv2"], pruning_perc=[30]))
    assert read_spec(first.spec_file[0]) == read_spec(again.spec_file[0])
    l1 = create_network_dataset(_settings(tmp_path / "c", networks=["mobilenetv2"], pruning_perc=[30], mode="l1-norm"))
    assert abs(l1.level_reached[0] - 30) <= 1
    assert read_spec(l1.spec_file[0])["out_channels"] != read_spec(first.spec_file[0])["out_channels"]


def test_users_own_model_file_from_model_desc_dir(tmp_path, tinynet_file):
    settings = _settings(tmp_path, networks=["tinynet"], pruning_perc=[0, 40], model_desc_dir=tinynet_file.parent)
    manifest = create_network_dataset(settings)
    spec = read_spec(settings.model_path / "tinynet_40.json")
    assert spec["torchvision"] is None and spec["model_desc"] == str(tinynet_file)
    assert abs(manifest.level_reached[1] - 40) <= 1
    rebuilt = build_from_spec(spec)
    assert sum(p.numel() for p in rebuilt.parameters()) == spec["params"] == manifest.params[1]
    assert rebuilt.conv2.in_channels == spec["out_channels"]["conv1"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pruning_perc": [0, 96]}, r"pruning_perc: pruning level 96 is outside \[0, 95\]"),
        ({"mode": "magnitude"}, r"mode: unknown pruning mode 'magnitude'"),
        ({"input_size": [3, 32]}, r"input_size: input size \[3, 32\] is not three positive integers"),
        ({"networks": []}, r"^networks: no network given$"),
        ({"pruning_perc": []}, r"^pruning_perc: no level given$"),
        ({"seed": -1}, r"^seed: pruning seed -1 is not an integer in \[0, 4294967295\]$"),
        ({"seed": 2**32}, r"seed: pruning seed 4294967296 is not an integer in \[0, 4294967295\]"),
    ],
)
def test_bad_settings_are_refused_before_any_work(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        create_network_dataset(_settings(tmp_path, **changes))
    assert not (tmp_path / "models").exists()


def test_unknown_network_lists_the_known_ones_before_any_work(tmp_path):
    settings = _settings(tmp_path, networks=["squeezenet1_1", "lenet"])
    with pytest.raises(ConfigError, match=r"networks: unknown network 'lenet'.*known networks: alexnet"):
        create_network_dataset(settings)
    assert not settings.model_path.exists()  # squeezenet1_1, first, was not pruned


def test_a_config_with_a_bad_seed_exits_2_with_one_line(tmp_path, capsys):
    config = tmp_path / "config.ini"
    config.write_text(f"[create_network_dataset]\nnetworks = ['resnet18']\nseed = -1\nmodel_path = {tmp_path / 'models'}\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "[create_network_dataset] seed: pruning seed -1 is not an integer" in err and "Traceback" not in err
    assert not (tmp_path / "models").exists()


def test_the_manifest_lists_every_spec_in_the_folder_and_repeats_are_made_once(tmp_path, capsys):
    first = create_network_dataset(_settings(tmp_path, networks=["squeezenet1_1"], pruning_perc=[0, 50]))
    assert list(first["name"]) == ["squeezenet1_1_0", "squeezenet1_1_50"]
    # A second run, of other levels with repeats, keeps the first run's specs listed (its
    # level 50 is pruned after 30, not 0, so it differs: replaced only with overwrite).
    again = create_network_dataset(
        _settings(tmp_path, networks=["squeezenet1_1", "squeezenet1_1"], pruning_perc=[30, 30, 50], overwrite=True))
    out = " ".join(capsys.readouterr().out.split())
    assert "networks: 1 repeated entries made once" in out and "pruning_perc: 1 repeated entries made once" in out
    assert sorted(again["name"]) == ["squeezenet1_1_0", "squeezenet1_1_30", "squeezenet1_1_50"]
    written = pd.read_csv(tmp_path / "models" / "manifest.csv")
    assert sorted(written["spec_file"]) == sorted(str(p) for p in (tmp_path / "models").glob("*.json"))
    assert written["level_reached"].notna().all()  # each spec records the level pruning reached
    row = written.set_index("name").loc["squeezenet1_1_50"]
    assert row["params"] == read_spec(tmp_path / "models" / "squeezenet1_1_50.json")["params"]

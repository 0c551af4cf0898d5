"""Architectures named by log rows, and the feature table joined to them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torchvision
from repository_data import ZOO

from perf4sight.errors import LogFormatError
from perf4sight.features import paper_features
from perf4sight.architecture import Detail
from perf4sight.device.definitions import MEMORY
from perf4sight.device.logs import SPEC_DIGEST
from perf4sight.fit import ArchitectureCatalog, architecture_name, build_dataset, read_logs
from perf4sight.networks import spec_from_module, write_spec


@pytest.mark.parametrize(
    ("model", "name"),
    [("/home/nvidia/models/resnet18_50.py", "resnet18_50"), ("C:\\logs\\squeezenet_0.py", "squeezenet_0"),
     ("googlenet_10", "googlenet_10")],
)
def test_architecture_name_is_the_file_stem(model, name):
    assert architecture_name(model) == name


def test_complete_catalog_traces_what_a_spec_describes(h200_dir):
    catalog = ArchitectureCatalog(h200_dir / "models")
    partial, full = catalog.get("squeezenet_60", needs=Detail.LAYER_TABLE), catalog.get("squeezenet_60")
    assert not partial.complete and full.complete and not full.lifetimes
    assert {"relu", "max_pool2d", "cat"} <= {layer.kind for layer in full.layers}
    pd.testing.assert_frame_equal(paper_features(partial, [4, 32]), paper_features(full, [4, 32]))
    assert catalog.get("squeezenet_60") is full  # loaded once
    assert catalog.get("squeezenet_60", needs=Detail.LAYER_TABLE) is partial
    assert catalog.get("squeezenet_5") is None


def test_rows_get_the_features_of_their_architecture_and_batch_size(h200_dir):
    logs = read_logs(["googlenet", "resnet18"], [30, 60], [h200_dir / "memory"], [MEMORY])
    catalog = ArchitectureCatalog(h200_dir / "models")
    dataset = build_dataset(logs, target="mem_used_mib", feature_set="paper", stage="training", catalog=catalog)
    passed = logs[logs["passed"] & (logs["stage"] == "training")]  # the H200 logs hold inference runs too
    assert len(passed) < len(logs) and len(dataset) == len(dataset.features) == len(passed)
    assert set(dataset.rows["model"]) == {"googlenet_30", "googlenet_60", "resnet18_30", "resnet18_60"}
    assert (dataset.features["batch_size"].to_numpy() == dataset.rows["batch_size"].to_numpy()).all()
    np.testing.assert_array_equal(np.sort(dataset.target), np.sort(passed["mem_used_mib"].to_numpy()))
    row = dataset.rows.index[(dataset.rows["model"] == "resnet18_60") & (dataset.rows["batch_size"] == 32)][0]
    expected = paper_features(catalog.get("resnet18_60", needs=Detail.LAYER_TABLE), [32]).iloc[0]
    pd.testing.assert_series_equal(dataset.features.iloc[row], expected, check_names=False)
    assert dataset.rows.loc[row, "params"] == catalog.get("resnet18_60", needs=Detail.LAYER_TABLE).params
    subset = dataset.select(dataset.rows["net"] == "googlenet")
    assert set(subset.rows["net"]) == {"googlenet"} and len(subset) == len(subset.features)



def _log_as(tmp_path, dataset: str):
    """A memory log of `squeezenet_0` (a 3x64x64, 10-class spec) profiled with
    `[profile] dataset = <dataset>`."""
    spec = spec_from_module(torchvision.models.squeezenet1_1(num_classes=10), name="squeezenet_0", net="squeezenet",
                            prune_level=0, input_size=(3, 64, 64), num_classes=10, torchvision_name="squeezenet1_1")
    write_spec(spec, tmp_path / "models" / "squeezenet_0.json")
    rows = [f"True|{100 + bs}|{bs}|{dataset}|squeezenet|/device/models/squeezenet_0.json|training" for bs in (2, 8)]
    log = tmp_path / "logs" / "squeezenet_0-gt.csv"
    log.parent.mkdir()
    log.write_text("\n".join(["passed|mem_used|bs|dataset|net_name|model|stage", *rows]) + "\n")
    return read_logs(["squeezenet"], [0], [log.parent], [MEMORY])


@pytest.mark.parametrize("feature_set", ["paper", "network"])
def test_features_follow_the_input_size_the_logs_dataset_ran(tmp_path, feature_set):
    catalog = ArchitectureCatalog(tmp_path / "models")
    logs = _log_as(tmp_path, "cifar10")
    built = build_dataset(logs, target="mem_used_mib", feature_set=feature_set, stage="training", catalog=catalog)
    # cifar10 ran the 3x64x64 spec on 3x32x32 inputs: a quarter of the activations
    spec_size = build_dataset(logs.assign(dataset="spec"), target="mem_used_mib", feature_set=feature_set,
                              stage="training", catalog=catalog)
    smaller = built.features.drop(columns="batch_size") < spec_size.features.drop(columns="batch_size")
    assert smaller.any(axis=1).all()
    if feature_set == "network":
        assert built.features["input_bytes"].tolist() == [bs * 3 * 32 * 32 * 4 for bs in (2, 8)]
        assert spec_size.features["input_bytes"].tolist() == [bs * 3 * 64 * 64 * 4 for bs in (2, 8)]


def test_an_unknown_dataset_in_a_log_names_the_file(tmp_path):
    logs = _log_as(tmp_path, "mnist")
    catalog = ArchitectureCatalog(tmp_path / "models")
    with pytest.raises(LogFormatError, match=r"squeezenet_0-gt.csv: dataset='mnist' .*known: spec, imagenet"):
        build_dataset(logs, target="mem_used_mib", feature_set="paper", stage="training", catalog=catalog)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("name", "resnet18_45", "the spec's name is 'resnet18_45', but the logs that name this file measured the "
                            "architecture 'alexnet_45'"),
    ("net", "vgg11", "the spec's net is 'vgg11', but the logs that name this file measured the network 'alexnet'"),
])
def test_a_spec_that_says_another_network_than_its_logs_is_refused(tmp_path, key, value, message):
    # as logs that record no spec digest (the original's) read it: the names are what is checked
    logs = read_logs(["alexnet"], [45], [ZOO / "memory"], [MEMORY]).drop(columns=SPEC_DIGEST)
    spec = json.loads((ZOO / "models" / "alexnet_45.json").read_text())
    (tmp_path / "alexnet_45.json").write_text(json.dumps({**spec, key: value}))
    with pytest.raises(LogFormatError, match=rf"{tmp_path / 'alexnet_45.json'}: {message}"):
        build_dataset(logs, target="mem_used_mib", feature_set="paper", stage="training",
                      catalog=ArchitectureCatalog(tmp_path))
    (tmp_path / "alexnet_45.json").write_text(json.dumps(spec))
    assert len(build_dataset(logs, target="mem_used_mib", feature_set="paper", stage="training",
                             catalog=ArchitectureCatalog(tmp_path))) == int(logs["passed"].sum())

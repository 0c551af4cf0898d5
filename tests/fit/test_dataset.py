"""Architectures named by log rows, and the feature table joined to them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perf4sight.features import paper_features
from perf4sight.fit import ArchitectureCatalog, architecture_name, build_dataset, read_logs


@pytest.mark.parametrize(
    ("model", "name"),
    [("/home/nvidia/models/resnet18_50.py", "resnet18_50"), ("C:\\logs\\squeezenet_0.py", "squeezenet_0"),
     ("googlenet_10", "googlenet_10")],
)
def test_architecture_name_is_the_file_stem(model, name):
    assert architecture_name(model) == name


def test_complete_catalog_traces_what_a_spec_describes(tx2_dir):
    specs = ArchitectureCatalog(tx2_dir / "models", complete=False)
    traced = ArchitectureCatalog(tx2_dir / "models", complete=True)
    partial, full = specs.get("squeezenet_50"), traced.get("squeezenet_50")
    assert not partial.complete and full.complete
    assert {"relu", "max_pool2d", "cat"} <= {layer.kind for layer in full.layers}
    pd.testing.assert_frame_equal(paper_features(partial, [4, 32]), paper_features(full, [4, 32]))
    assert traced.get("squeezenet_50") is full  # loaded once
    assert traced.get("squeezenet_5") is None


def test_rows_get_the_features_of_their_architecture_and_batch_size(tx2_dir):
    logs = read_logs(["googlenet", "resnet18"], [20, 70], [tx2_dir / "memory"], ["mem_used"])
    catalog = ArchitectureCatalog(tx2_dir / "models", complete=False)
    dataset = build_dataset(logs, target="mem_used", feature_set="paper", stage="training", catalog=catalog)
    passed = logs[logs["passed"]]
    assert len(dataset) == len(dataset.features) == len(passed)
    assert set(dataset.rows["model"]) == {"googlenet_20", "googlenet_70", "resnet18_20", "resnet18_70"}
    assert (dataset.features["batch_size"].to_numpy() == dataset.rows["batch_size"].to_numpy()).all()
    np.testing.assert_array_equal(np.sort(dataset.target), np.sort(passed["mem_used"].to_numpy()))
    row = dataset.rows.index[(dataset.rows["model"] == "resnet18_70") & (dataset.rows["batch_size"] == 32)][0]
    expected = paper_features(catalog.get("resnet18_70"), [32]).iloc[0]
    pd.testing.assert_series_equal(dataset.features.iloc[row], expected, check_names=False)
    assert dataset.rows.loc[row, "params"] == catalog.get("resnet18_70").params
    subset = dataset.select(dataset.rows["net"] == "googlenet")
    assert set(subset.rows["net"]) == {"googlenet"} and len(subset) == len(subset.features)

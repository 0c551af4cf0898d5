"""The first step of every model: a query frame of architectures and batch sizes to feature
columns, each architecture's table computed once and kept while the architecture lives."""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest
from torch import nn

from perf4sight.architecture import Detail, derived_values, family_key
from perf4sight.architecture.derived import _KEPT
from perf4sight.device import definitions
from perf4sight.device.definitions import MAX_BATCH_SIZE, BatchSizes, check_batch_sizes
from perf4sight.errors import NetworkError
from perf4sight.features import FEATURE_SETS, FeatureTransformer, feature_table, queries
from perf4sight.features.inputs import checked_batch_sizes
from perf4sight.networks import load_architecture


def _arch(width: int, needs: Detail = Detail.LAYERS):
    module = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))
    return load_architecture(module, input_size=(3, 16, 16), needs=needs)


def test_rows_of_several_networks_keep_the_query_order():
    small, large = _arch(4), _arch(12)
    query = pd.DataFrame({"architecture": [large, small, large, small, large],
                          "batch_size": [8, 2, 1, 64, 8], "net": ["l", "s", "l", "s", "l"]})
    table = FeatureTransformer("network").fit_transform(query)
    assert list(table.index) == list(range(5)) and table["batch_size"].tolist() == [8, 2, 1, 64, 8]
    for row, (arch, size) in enumerate(zip(query["architecture"], query["batch_size"])):
        expected = feature_table(arch, [int(size)], "network", "training").iloc[0]
        np.testing.assert_allclose(table.iloc[row].to_numpy(float), expected.to_numpy(float), rtol=1e-12)


def test_a_table_is_computed_once_per_architecture_and_extended_for_new_batch_sizes(monkeypatch):
    arch = _arch(6)
    asked: list[list[int]] = []
    network = FEATURE_SETS["network"]

    def counted(a, batch_sizes, stage):
        asked.append(list(batch_sizes))
        return network(a, batch_sizes, stage)

    counted.needs = network.needs
    monkeypatch.setitem(FEATURE_SETS, "network", counted)
    first = feature_table(arch, [16, 4], "network", "training")
    assert first["batch_size"].tolist() == [16, 4] and asked == [[4, 16]]
    again = FeatureTransformer("network").fit_transform(queries(arch, [4, 16, 4]))
    assert asked == [[4, 16]] and again["batch_size"].tolist() == [4, 16, 4]
    feature_table(arch, [2, 16], "network", "training")
    assert asked == [[4, 16], [2]]  # only the batch size not asked before
    feature_table(arch, [2, 16], "network", "inference")  # another stage: another table
    assert asked[-1] == [2, 16]
    assert len(asked) == 3


def test_batch_sizes_are_checked_at_the_door_and_passed_inward_as_checked(monkeypatch):
    arch = _arch(7, Detail.LIFETIMES)
    checked = check_batch_sizes([8, 2], "sizes")
    assert isinstance(checked, BatchSizes) and checked == (8, 2) and check_batch_sizes(checked, "again") is checked
    calls = []
    original = definitions.is_positive_int
    monkeypatch.setattr(definitions, "is_positive_int", lambda value: calls.append(value) or original(value))
    feature_table(arch, [8, 2], "network", "training")
    assert calls == [8, 2]  # the table checks its sizes; the feature set gets them as checked
    calls.clear()
    FEATURE_SETS["replay"](arch, checked, "training")
    assert calls == []  # replay's features and the network features inside them take the record
    # a query frame's float batch size is refused, not truncated to an integer
    with pytest.raises(NetworkError, match=r"batch sizes: expected positive integers, got 1\.5"):
        FeatureTransformer("network").fit_transform(pd.DataFrame({"architecture": [arch], "batch_size": [1.5]}))
    # a query frame's integer column passes in one test, as the same record; out of range, the same refusal
    frame_sizes = np.array([8, 2, MAX_BATCH_SIZE])
    expected = check_batch_sizes(frame_sizes.tolist(), "sizes")
    calls.clear()
    assert checked_batch_sizes(arch, frame_sizes) == expected and calls == []
    for bad, shown in ((np.array([8, 0]), "got 0"), (np.array([MAX_BATCH_SIZE + 1]), f"{MAX_BATCH_SIZE + 1} is above")):
        with pytest.raises(NetworkError, match=f"batch sizes: .*{shown}"):
            checked_batch_sizes(arch, bad)


def test_what_is_kept_goes_with_the_architecture():
    arch = _arch(5)
    key = id(arch)
    family_key(arch)
    feature_table(arch, [1, 2], "network", "training")
    assert {key if isinstance(key, str) else key[:3] for key in derived_values(arch)} == {
        "family", ("features", "network", "training")}
    del arch
    gc.collect()
    assert key not in _KEPT
    twin_a, twin_b = _arch(5), _arch(5)  # equal descriptions, loaded apart: kept apart
    derived_values(twin_a)["x"] = 1
    assert "x" not in derived_values(twin_b)


def test_a_query_that_is_not_a_frame_of_architectures_is_refused():
    transformer = FeatureTransformer("network")
    with pytest.raises(ValueError, match="query frame with columns 'architecture' and 'batch_size'"):
        transformer.fit(pd.DataFrame({"batch_size": [1]}))
    with pytest.raises(ValueError, match="holds a str, not an Architecture"):
        transformer.fit(pd.DataFrame({"architecture": ["resnet18"], "batch_size": [1]}))
    with pytest.raises(ValueError, match="feature_set 'forest' is not one of"):
        FeatureTransformer("forest").fit(queries(_arch(4), [1]))
    fitted = transformer.fit(queries(_arch(4), [1, 2]))
    assert list(fitted.get_feature_names_out()) == list(feature_table(_arch(4), [1], "network", "training").columns)

"""The terms each feature set declares: every column they weigh is one the set computes, on a
real torchvision network, and a term naming a column the set does not compute is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perf4sight.architecture import Detail
from perf4sight.device.recipe import Recipe
from perf4sight.features import FEATURE_TERMS, feature_table
from perf4sight.features.network import LAYER_GROUPS, NETWORK_TERMS, PLANES_TERMS, STREAM_TERMS, group_column
from perf4sight.features.terms import Role, Term, TermSet, report_only
from perf4sight.fit.physical import term_design
from perf4sight.networks import load_architecture


@pytest.fixture(scope="module")
def tables():
    """Each feature set with terms, for torchvision's MobileNetV2 (depthwise, 1x1 and Linear
    layers) at a small input, as a device that measured its fresh pages' cost computes them."""
    arch = load_architecture("mobilenet_v2", input_size=(3, 32, 32), num_classes=10, needs=Detail.LIFETIMES)
    return {name: feature_table(arch, [1, 3], name, "training", fresh_pages_ms_per_mib=0.25) for name in FEATURE_TERMS}


@pytest.mark.parametrize(("feature_set", "terms"),
                         [(name, terms) for name, sets in sorted(FEATURE_TERMS.items()) for terms in sets])
def test_every_term_weighs_columns_its_feature_set_computes(tables, feature_set, terms):
    table = tables[feature_set]
    assert terms.columns() <= set(table.columns)
    for kind, declared in terms.by_kind.items():
        design = term_design(table, declared)
        assert design.shape == (2, len(declared)), kind
        # every term of this network holds something (it has every kind the terms weigh but
        # grouped convolutions, weights above 32 MiB and pooling: its global pooling is a
        # functional call that ATen runs as a mean; the default recipe computes nothing under
        # autocast; and on a CPU the step's temporaries are counted beside the activations,
        # `step_temp`, the optimizer's term holding only the gradients a step that clears them
        # first has not made again at the peak), and grows with the batch size or stays as it is
        held = {term.name for term, column in zip(declared, design.T) if column.any()}
        assert held == {term.name for term in declared} - {"grouped", "autocast_gemm", "fresh_pages", "pooling",
                                                           "optimizer"}
        assert (design[1] >= design[0]).all()
    # the rest of the columns feed no model: the batch size, the amounts kept for reading
    # and the layer counts (the predictor's check of the training ranges and layer groups)
    rest = report_only(table.columns, terms)
    assert sorted(rest + sorted(terms.columns())) == sorted(table.columns)
    assert {group_column(group, "count") for group in LAYER_GROUPS} - terms.columns() <= set(rest)


def test_the_split_latency_model_moves_the_same_bytes(tables):
    """`STREAM_TERMS` splits `NETWORK_TERMS`' traffic by the kernels that move it: the two
    parts add up to the one, and depthwise convolutions stay a term of their own."""
    table = tables["network"]
    one = dict(zip((t.name for t in NETWORK_TERMS.latency), term_design(table, NETWORK_TERMS.latency).T))
    split = dict(zip((t.name for t in STREAM_TERMS.latency), term_design(table, STREAM_TERMS.latency).T))
    assert split["gemm_traffic"].all() and split["memory_bound_traffic"].all()
    np.testing.assert_allclose(split["gemm_traffic"] + split["memory_bound_traffic"], one["traffic"], rtol=1e-12)
    for name in ("gemm", "launches", "parameters", "depthwise", "grouped"):
        np.testing.assert_array_equal(split[name], one[name])
    # a depthwise convolution costs the bytes it moves, at a rate of its own and no other's
    # (0 where no training network shows it); the parameters' passes at their own rate too
    np.testing.assert_array_equal(one["depthwise"], table[group_column("conv_depthwise", "bytes")])
    traffic = next(term for term in NETWORK_TERMS.latency if term.name == "traffic")
    assert one["depthwise"].all() and group_column("conv_depthwise", "bytes") not in traffic.columns  # counted once
    np.testing.assert_array_equal(one["parameters"], table["param_traffic_bytes"])
    ties = {t.name: t.tie for t in STREAM_TERMS.latency}
    assert ties["depthwise"] is None and ties["parameters"] is None and ties["grouped"] == "gemm"


@pytest.mark.parametrize("recipe", [Recipe(), Recipe(precision="amp-bf16")])
def test_planes_takes_the_linear_layers_operations_out_of_the_gemm_term(recipe):
    """`PLANES_TERMS` prices the Linear layers' GEMM work at a rate of its own: its `gemm` and
    `linear` terms add up to `NETWORK_TERMS`' `gemm`, in fp32 and under autocast (where that
    work is all `autocast_gemm`'s and neither holds any), counted once."""
    table = feature_table(load_architecture("resnet18", input_size=(3, 32, 32), num_classes=10, recipe=recipe),
                          [2, 8], "network", "training")
    one = dict(zip((t.name for t in NETWORK_TERMS.latency), term_design(table, NETWORK_TERMS.latency).T))
    planes = dict(zip((t.name for t in PLANES_TERMS.latency), term_design(table, PLANES_TERMS.latency).T))
    linear = table[group_column("linear", "padded_flops")].to_numpy()
    assert linear.all() and (planes["gemm"] > 0).all() == (recipe == Recipe())
    np.testing.assert_allclose(planes["gemm"] + planes["linear"], one["gemm"], rtol=1e-9, atol=1e-3)
    np.testing.assert_array_equal(planes["autocast_gemm"], one["autocast_gemm"])
    np.testing.assert_allclose(planes["linear"], linear if recipe == Recipe() else 0 * linear, atol=1e-3)
    assert {t.name: t.tie for t in PLANES_TERMS.latency}["linear"] == "gemm"


def test_a_term_on_a_renamed_group_is_caught(tables):
    """Were a group renamed in a term but not where the columns are computed (or the reverse),
    the term's column would be missing from the table: the fit refuses it by name."""
    table = tables["network"]
    depthwise = next(term for term in NETWORK_TERMS.latency if term.name == "depthwise")
    (column,) = depthwise.columns
    renamed = dataclasses.replace(depthwise, columns={column.replace("depthwise", "dw"): 1.0})
    terms = TermSet("test", memory=NETWORK_TERMS.memory,
                    latency=tuple(renamed if term is depthwise else term for term in NETWORK_TERMS.latency))
    assert not terms.columns() <= set(table.columns)
    with pytest.raises(ValueError, match=f"missing: {column.replace('depthwise', 'dw')}"):
        term_design(table, terms.latency)


def test_term_sets_refuse_ties_to_nothing_and_names_twice():
    traffic = Term("traffic", {"a": 1.0}, "bytes")
    with pytest.raises(ValueError, match="tied to no fitted term: depthwise"):
        TermSet("test", memory=(), latency=(traffic, Term("depthwise", {"b": 1.0}, "bytes", tie="gemm")))
    with pytest.raises(ValueError, match="named twice"):
        TermSet("test", memory=(traffic, traffic), latency=())
    with pytest.raises(ValueError, match="no columns"):
        Term("empty", {}, "bytes", Role.EXACT)


@pytest.mark.parametrize("terms", [NETWORK_TERMS, STREAM_TERMS])
def test_autocast_moves_the_gemm_work_to_its_own_term(terms: TermSet) -> None:
    """Under bf16 autocast the same GEMM work is the `autocast_gemm` term's (tied to the GEMM
    rate until a recipe with autocast is fitted on), none of it left at the fp32 rate."""
    designs = {}
    for precision in ("fp32", "amp-bf16"):
        arch = load_architecture("resnet18", input_size=(3, 32, 32), num_classes=10, recipe=Recipe(precision=precision))
        design = term_design(feature_table(arch, [2, 8], "network", "training"), terms.latency)
        designs[precision] = dict(zip([term.name for term in terms.latency], design.T))
    assert (designs["fp32"]["gemm"] > 0).all() and not designs["fp32"]["autocast_gemm"].any()
    np.testing.assert_array_equal(designs["amp-bf16"]["autocast_gemm"], designs["fp32"]["gemm"])
    assert not designs["amp-bf16"]["gemm"].any()
    assert {term.name: term.tie for term in terms.latency}["autocast_gemm"] == "gemm"

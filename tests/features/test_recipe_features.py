"""Architectures and features under a training recipe, on real traced networks: what the
recipe changes (frozen layers, the optimizer's state, autocast's bytes, checkpointed
segments), checked against autograd's own saved tensors and the real optimizers' steps."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from perf4sight.architecture import Detail, family_key, trace_architecture
from perf4sight.architecture.lifetimes import record_timeline
from perf4sight.features.caching_allocator import replay
from perf4sight.device.errors import ArgumentError
from perf4sight.device.recipe import OPTIMIZERS, Recipe
from perf4sight.device.workload import autocast, checkpoint_blocks, iteration, make_optimizer, prepare_model
from perf4sight.features import network_features, recipe_extrapolation
from perf4sight.networks import build_from_spec, load_architecture, read_spec
from perf4sight.networks.registry import build_uninitialised

SMALL = (3, 32, 32)
BATCHES = [1, 4]


def _sequential() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def _table(source, recipe: Recipe = Recipe(), stage: str = "training"):
    return network_features(load_architecture(source, input_size=SMALL, recipe=recipe), BATCHES, stage)


@pytest.mark.parametrize("source", ["resnet18", "mobilenet_v2"])
def test_default_recipe_changes_nothing(source):
    for stage in ("training", "inference"):
        plain = network_features(load_architecture(source, input_size=SMALL), BATCHES, stage)
        explicit = _table(source, Recipe(), stage)
        assert plain.equals(explicit)
    assert family_key(load_architecture(source, input_size=SMALL)) == \
        family_key(load_architecture(source, input_size=SMALL, recipe=Recipe()))


@pytest.mark.parametrize("source, first", [("resnet18", "layer4"), ("mobilenet_v2", "features.17")])
def test_frozen_prefix_keeps_no_gradients_and_saves_less(source, first):
    full = load_architecture(source, input_size=SMALL)
    frozen = load_architecture(source, input_size=SMALL, recipe=Recipe(trainable=first))
    trained = [layer for layer in frozen.layers if layer.trained and layer.params]
    assert 0 < frozen.trainable_params < full.trainable_params == full.params
    assert frozen.trainable_params == sum(layer.params for layer in trained)
    # the frozen prefix (every layer before the first trained one): no gradient of anything,
    # no backward pass, nothing saved
    start = next(index for index, layer in enumerate(frozen.layers) if layer.name.startswith(first))
    prefix = frozen.layers[:start]
    assert prefix and not any(layer.trained and layer.params for layer in prefix)
    assert not any(layer.backward or layer.grad_input or layer.saved_bytes for layer in prefix)
    table, base = _table(source, Recipe(trainable=first)), _table(source)
    assert (table["saved_bytes"] < base["saved_bytes"]).all()
    assert (table["activation_peak_bytes"] < base["activation_peak_bytes"]).all()
    # weights of every layer; gradients and momentum of the trained ones only
    dtype = full.dtype_bytes
    assert (table["param_state_bytes"] == dtype * (full.params + 2 * frozen.trainable_params)).all()
    assert (table["param_bytes"] == base["param_bytes"]).all()
    # no weight-gradient GEMMs in the prefix, no input-gradient ones either
    assert (table["conv_kxk_flops"] < base["conv_kxk_flops"]).all()


def test_classifier_only_trains_the_last_layer_and_its_gradients_are_the_gemm_left():
    arch = load_architecture("resnet18", input_size=SMALL, recipe=Recipe(trainable="classifier"))
    assert arch.trainable_params == 512 * 1000 + 1000
    table = network_features(arch, [1], "training").iloc[0]
    inference = network_features(arch, [1], "inference").iloc[0]
    # every convolution runs its forward pass only; the Linear layer its forward and weight gradient
    assert table["conv_kxk_flops"] == inference["conv_kxk_flops"]
    assert table["linear_flops"] == 2 * inference["linear_flops"]


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_optimizer_state_is_its_buffers_times_the_trained_parameters(optimizer):
    arch = load_architecture(_sequential(), input_size=SMALL, recipe=Recipe(optimizer=optimizer))
    table = network_features(arch, BATCHES, "training")
    dtype = arch.dtype_bytes
    buffers = OPTIMIZERS[optimizer].state_buffers
    assert (table["param_state_bytes"] == dtype * (arch.params + (1 + buffers) * arch.trainable_params)).all()
    if optimizer == "adam":
        state = table["param_state_bytes"] - dtype * 2 * arch.params  # weights and gradients
        assert (state == 2 * dtype * arch.trainable_params).all()


@pytest.mark.parametrize("zero_grad, held", [("after-loss", [False, True, True]), ("first", [False, False, False])])
def test_where_the_step_clears_the_gradients_decides_what_the_forward_pass_holds(zero_grad, held):
    """The profiler's iteration, on the CPU: cleared after the loss, the last step's gradients
    are there through the next forward pass; cleared first, none is."""
    model = _sequential()
    seen = []
    model[0].register_forward_pre_hook(lambda *_: seen.append(any(p.grad is not None for p in model.parameters())))
    step = iteration(model, "training", torch.randn(2, *SMALL), 10, Recipe(zero_grad=zero_grad))
    for _ in range(3):
        step()
    assert seen == held


def test_gradients_cleared_first_are_those_the_backward_pass_has_made_at_the_peak():
    """Cleared first, the gradients at the peak are those of the layers the backward pass has
    been through (fewer than all); the rest come at the step, beside the optimizer's temporaries.
    The saving agrees with the allocator replay of the recorded iterations."""
    size, bs = (3, 32, 32), 32
    features, peaks = {}, {}
    for order in ("after-loss", "first"):
        arch = load_architecture("mobilenet_v2", input_size=size, recipe=Recipe(zero_grad=order))
        features[order] = network_features(arch, [bs]).iloc[0]
        peaks[order] = replay(record_timeline(torchvision.models.mobilenet_v2, size, 1000, "training", arch=arch),
                              bs).peak_allocated
    after, first = features["after-loss"], features["first"]
    assert after["gradient_bytes"] == arch.trainable_params * arch.dtype_bytes
    saving = after["gradient_bytes"] - first["gradient_bytes"]
    assert 0 < saving < after["gradient_bytes"]
    assert after["param_state_bytes"] - first["param_state_bytes"] == pytest.approx(saving)
    assert first["optimizer_temp_bytes"] - after["optimizer_temp_bytes"] == pytest.approx(saving)
    assert peaks["after-loss"] - peaks["first"] == pytest.approx(saving, rel=0.25)
    # the same kernels run in either order: a family's corrections carry over
    assert family_key(arch) == family_key(load_architecture("mobilenet_v2", input_size=size))


class _ParameterPasses(TorchDispatchMode):
    """Parameter-sized tensors each op reads or writes, and how many new ones ops make."""

    def __init__(self, numel: int, kept: set[int]) -> None:
        super().__init__()
        self.numel, self.kept = numel, kept
        self.passes = 0
        self.new: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sized = [t for t in (*args, *(kwargs or {}).values()) if isinstance(t, torch.Tensor) and t.numel() == self.numel]
        outs = [t for t in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(t, torch.Tensor) and t.numel() == self.numel]
        self.passes += len(sized) + len(outs)
        self.new |= {t.untyped_storage().data_ptr() for t in outs} - self.kept
        return out


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_optimizer_passes_are_what_its_step_moves(optimizer):
    """`Optimizer.passes`: the parameter-sized tensors the recipe's optimizer (as the profiler
    makes it) reads or writes in a steady-state step; `temporaries`: the new ones it makes
    (each used at once, all of a parameter's alive until its update)."""
    weight = nn.Parameter(torch.randn(1000))
    opt = make_optimizer([weight], Recipe(optimizer=optimizer))
    for _ in range(2):  # the first step creates the state
        weight.grad = torch.randn(1000)
        opt.step()
    weight.grad = torch.randn(1000)
    kept = {t.untyped_storage().data_ptr() for t in (weight, weight.grad, *opt.state[weight].values())
            if isinstance(t, torch.Tensor) and t.numel() == 1000}
    counter = _ParameterPasses(1000, kept)
    with counter:
        opt.step()
    assert counter.passes == OPTIMIZERS[optimizer].passes
    assert len(counter.new) == OPTIMIZERS[optimizer].temporaries


def test_autocast_roughly_halves_what_autograd_saves():
    for source in ("resnet18", "mobilenet_v2", _sequential()):
        base, cast = _table(source), _table(source, Recipe(precision="amp-bf16"))
        ratio = (cast["saved_bytes"] / base["saved_bytes"]).to_numpy()
        assert ((ratio > 0.45) & (ratio < 0.6)).all(), ratio
        # bytes moved by the layers halve too; the fp32 master weights stay, with their cast copies
        assert (cast["norm_bytes"] == base["norm_bytes"] / 2).all()
        assert (cast["param_state_bytes"] > base["param_state_bytes"]).all()
        assert (cast["param_bytes"] == base["param_bytes"]).all()


def _taps(layer) -> int:
    """The kernel taps a convolution computes over its output, as torch counts them: every
    tap of a GEMM convolution, only those inside the input for a depthwise one."""
    if not layer.depthwise:
        return int(np.prod(layer.kernel) * np.prod(layer.output[1:]))
    ones = torch.nn.functional.conv2d(torch.ones(1, 1, *layer.in_shape[1:]), torch.ones(1, 1, *layer.kernel),
                                      stride=layer.stride, padding=layer.padding, dilation=layer.dilation)
    return int(ones.sum())


@pytest.mark.parametrize("source", ["resnet18", "mobilenet_v2"])
def test_checkpointing_saves_less_and_recomputes(source):
    base = _table(source)
    arch = load_architecture(source, input_size=SMALL, recipe=Recipe(checkpoint_segments=4))
    segments = sorted({layer.segment for layer in arch.layers})
    assert segments == [0, 1, 2, 3]  # the last segment runs normally, as checkpoint_sequential's does
    table = network_features(arch, BATCHES, "training")
    assert (table["saved_bytes"] < base["saved_bytes"]).all()
    assert (table["activation_peak_bytes"] <= base["activation_peak_bytes"]).all()
    recomputed = [layer for layer in arch.layers if layer.recomputed]
    extra = sum(2 * layer.output[0] * layer.in_shape[0] // layer.groups * _taps(layer)
                for layer in recomputed if layer.kind == "conv2d")
    gemm = [c for c in table.columns if c.startswith("conv_") and c.endswith("_flops") and "padded" not in c]
    assert np.allclose(table[gemm].sum(axis=1) - base[gemm].sum(axis=1), table["batch_size"] * extra)


def test_recomputed_layers_are_those_of_the_checkpointed_blocks():
    """The segments observed on the checkpointed model lie within the blocks the profiler's
    checkpointing splits (`checkpoint_blocks`), each starting a block; a segment of frozen
    layers whose input needs no gradient is not recomputed (the backward never reaches it)."""
    model = torchvision.models.resnet18()
    blocks = checkpoint_blocks(model, torch.randn(2, *SMALL))
    arch = load_architecture("resnet18", input_size=SMALL, recipe=Recipe(checkpoint_segments=4))
    recomputed = [layer for layer in arch.layers if layer.recomputed]
    assert all(any(layer.name == block or layer.name.startswith(block + ".") for block in blocks)
               for layer in recomputed)
    firsts = [layer.name for index, layer in enumerate(arch.layers)
              if layer.segment and (index == 0 or arch.layers[index - 1].segment != layer.segment)]
    assert firsts == ["conv1", "maxpool", "layer2.0.conv1"]  # 13 blocks, 3 per segment, the last 4 not
    frozen = load_architecture("resnet18", input_size=SMALL, recipe=Recipe(trainable="layer3", checkpoint_segments=4))
    assert {layer.name.split(".")[0] for layer in frozen.layers if layer.recomputed} == {"layer2", "layer3"}


_NETWORKS = {"sequential": (_sequential, "3"), "resnet18": (torchvision.models.resnet18, "layer4"),
             "mobilenet_v2": (torchvision.models.mobilenet_v2, "features.14"),
             "vgg11": (torchvision.models.vgg11, "features.11")}


@pytest.mark.parametrize("network", ["sequential", "resnet18", *(pytest.param(name, marks=pytest.mark.slow)
                                                                  for name in ("mobilenet_v2", "vgg11"))])
def test_saved_bytes_match_autograd_under_each_recipe(network):
    """The trace's saved bytes (kept from the forward to the backward) equal, under each
    recipe, the tensors autograd saves in a real forward pass of the model as the profiler
    prepares it, on the CPU (each storage once; parameters and per-channel statistics aside).
    The weights' values change no tensor's size, so they are left uninitialised."""
    factory, first = _NETWORKS[network]
    build = functools.partial(build_uninitialised, factory)
    batch = 4
    recipes = (Recipe(), Recipe(trainable=first), Recipe(trainable="classifier"), Recipe(precision="amp-bf16"),
               Recipe(checkpoint_segments=2), Recipe(trainable=first, precision="amp-bf16", checkpoint_segments=4))
    for recipe in recipes:
        arch = load_architecture(build(), input_size=SMALL, recipe=recipe)
        expected = network_features(arch, [batch], "training")["saved_bytes"].iloc[0]
        model = build()
        x = torch.randn(batch, *SMALL)
        run = prepare_model(model, recipe, example=x)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in params and t.dim() and t.shape[0] == batch:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        model.train()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(recipe, "cpu"):
            run(x)
        fixed = sum(layer.saved_fixed_bytes for layer in arch.layers)
        assert sum(storages.values()) == expected - fixed, recipe


@pytest.fixture
def pruned_spec(h200_dir: Path) -> Path:
    return h200_dir / "models" / "resnet18_60.json"


def test_spec_variants_follow_the_recipe(pruned_spec):
    """A pruned spec propagated from its base's trace under a recipe has the features of its
    own rebuilt module traced under that recipe."""
    recipe = Recipe(optimizer="adam", trainable="layer4", precision="amp-bf16", checkpoint_segments=4)
    propagated = load_architecture(str(pruned_spec), recipe=recipe)
    spec = read_spec(str(pruned_spec))
    traced = trace_architecture(build_from_spec(spec, device="meta"), spec["input_size"], recipe=recipe)
    assert propagated.recipe == recipe and propagated.trainable_params == traced.trainable_params
    for stage in ("training", "inference"):
        assert network_features(propagated, BATCHES, stage).equals(network_features(traced, BATCHES, stage))
    assert family_key(propagated) != family_key(load_architecture(str(pruned_spec)))


def test_recipe_extrapolation_names_half_precision_rates_and_unprofiled_kinds_of_step():
    default = Recipe()
    assert recipe_extrapolation(default, [default]) == []
    assert recipe_extrapolation(Recipe(trainable="classifier", checkpoint_segments=4), [default]) == []
    found = recipe_extrapolation(Recipe(precision="amp-bf16", optimizer="adam"), [default])
    assert [item.calibrate for item in found] == [Recipe(precision="amp-bf16"), Recipe(optimizer="adam")]
    assert found[0].terms == ("autocast_gemm",) and "amp-bf16" in str(found[0])
    assert set(found[1].terms) == {"traffic", "gemm_traffic", "parameters"}
    assert str(found[1]).startswith("adam: a step of adam's kind was never timed, priced per pass as sgd's")
    # an optimizer whose kind of step was profiled: its passes priced as that one's
    assert recipe_extrapolation(Recipe(optimizer="sgd-plain"), [default]) == []
    assert recipe_extrapolation(Recipe(optimizer="adamw"), [Recipe(optimizer="adam")]) == []
    assert recipe_extrapolation(Recipe(precision="amp-bf16", optimizer="adamw"),
                                [default, Recipe(precision="amp-bf16", optimizer="adamw")]) == []


@pytest.mark.parametrize("recipe, words", [
    (Recipe(trainable="layer9"), "no layer 'layer9'"),
    (Recipe(checkpoint_segments=99), "99 segments"),
    (Recipe(optimizer="lamb"), "unknown value 'lamb'"),
])
def test_a_recipe_the_network_cannot_take_is_one_line(recipe, words):
    with pytest.raises(ArgumentError, match=words) as caught:
        load_architecture("resnet18", input_size=SMALL, recipe=recipe)
    assert "\n" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [Recipe(optimizer="adam", trainable="layer4"),
                                    Recipe(optimizer="sgd-plain", trainable="classifier")])
def test_a_specs_lifetimes_under_a_recipe_are_its_bases_scaled(recipe, pruned_spec):
    """The replay's timeline of a pruned spec, scaled from its base's recording under the
    recipe, equals a fresh recording of the rebuilt spec under it (`iteration(..., recipe=)`)."""
    arch = load_architecture(str(pruned_spec), needs=Detail.LIFETIMES, recipe=recipe)
    spec = read_spec(str(pruned_spec))
    fresh = record_timeline(functools.partial(build_from_spec, spec, device="meta"), arch.input_size,
                            arch.num_classes, "training", arch)
    assert arch.lifetimes["training"].same_events(fresh)
    plain = load_architecture(str(pruned_spec), needs=Detail.LIFETIMES)
    assert not plain.lifetimes["training"].same_events(fresh)


def test_inference_features_follow_only_the_precision():
    """Inference trains nothing: its features under a recipe are those under the recipe's
    precision alone (`Recipe.for_stage`), as the profiler runs it."""
    recipe = Recipe(optimizer="adamw", trainable="layer4", precision="amp-bf16", checkpoint_segments=4)
    full = _table("resnet18", recipe, "inference")
    assert full.equals(_table("resnet18", recipe.for_stage("inference"), "inference"))
    assert not full.equals(_table("resnet18", Recipe(), "inference"))

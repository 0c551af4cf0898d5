"""Tensor lifetimes recorded on the meta device and replayed through the caching allocator model."""

from __future__ import annotations

import dataclasses
import functools
import gc
import pickle
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from perf4sight.architecture import Detail, Timeline, lifetimes, trace_architecture
from perf4sight.architecture.lifetimes import _record, record_timeline
from perf4sight.errors import NetworkError
from perf4sight.config import NetworkDatasetSettings, load_section
from perf4sight.features import FEATURE_SETS
from perf4sight.features.caching_allocator import replay, replay_peaks, replays
from perf4sight.features.network import network_features
from perf4sight.features.replay import replay_features
from perf4sight.networks import (build_from_spec, create_network_dataset, forget_traces, load_architecture, load_network,
                                 read_spec)

MIB = 1 << 20
INPUT = (3, 16, 16)


def _tiny() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


# lifetimes ---------------------------------------------------------------------------------

def _with_lifetimes(source, stage: str = "training", **options):
    """The architecture of `source` with the tensor lifetimes of `stage`."""
    return load_architecture(source, needs=Detail.LIFETIMES, stage=stage, **options)


@pytest.fixture(scope="module")
def tiny_timeline():
    return _with_lifetimes(_tiny(), input_size=INPUT).lifetimes["training"]


def test_the_timeline_scales_exactly_with_the_batch_size(tiny_timeline):
    recorded = _record(_tiny().to("meta"), INPUT, 10, "training", 7).events
    assert [(n, a) for n, a, _ in recorded] == list(zip(tiny_timeline.tensor.tolist(), tiny_timeline.allocates.tolist()))
    assert [size for *_, size in recorded] == tiny_timeline.sizes(7).tolist()


def test_the_timeline_holds_the_model_state_and_every_allocation_is_freed_at_most_once(tiny_timeline):
    module = _tiny()
    state = sum(p.numel() * 4 for p in module.parameters()) + sum(b.nbytes for b in module.buffers())
    # the parameters and buffers come first, as when the model moves to the device
    count = len(list(module.parameters())) + len(list(module.buffers()))
    assert tiny_timeline.allocates[:count].all()
    assert tiny_timeline.fixed_bytes[:count].sum() == state and not tiny_timeline.per_sample_bytes[:count].any()
    freed = tiny_timeline.tensor[~tiny_timeline.allocates]
    assert len(freed) == len(set(freed.tolist()))
    assert set(freed.tolist()) <= set(tiny_timeline.tensor[tiny_timeline.allocates].tolist())


def test_the_live_peak_covers_weights_gradients_momentum_and_the_saved_activations(tiny_timeline):
    arch = trace_architecture(_tiny(), INPUT)
    features = network_features(arch, [64], "training")
    peak = replay(tiny_timeline, 64).peak_allocated
    assert peak >= float(features["param_state_bytes"].iloc[0] + features["saved_bytes"].iloc[0])


def test_inference_holds_no_gradients():
    training, inference = (replay_peaks(record_timeline(_tiny, INPUT, 10, stage), [64])
                           for stage in ("training", "inference"))
    assert inference[0][0] < training[0][0]


def test_recording_leaves_the_callers_module_alone():
    module = _tiny()
    weight = module[0].weight.detach().clone()
    _with_lifetimes(module, input_size=INPUT)
    assert module[0].weight.device.type == "cpu" and torch.equal(module[0].weight, weight)
    assert module[0].weight.grad is None


def test_lifetimes_are_recorded_with_the_architecture_and_replayed_from_it(monkeypatch):
    forget_traces()  # the same network recorded by an earlier test would be scaled from it
    recorded = []
    original = lifetimes.record_timeline
    monkeypatch.setattr(lifetimes, "record_timeline", lambda *args: recorded.append(args[3]) or original(*args))
    assert not load_architecture(_tiny(), input_size=INPUT).lifetimes and recorded == []  # only when needed
    arch = _with_lifetimes(_tiny(), input_size=INPUT)
    assert recorded == ["training"] and list(arch.lifetimes) == ["training"]
    first = replay_features(arch, [2, 8], "training")
    # replaying records nothing: the lifetimes are the architecture's data, at any batch size
    assert replay_features(arch, [2, 8], "training").equals(first)
    replay_features(arch, [4], "training")
    assert recorded == ["training"]
    with pytest.raises(NetworkError, match="needs the tensor lifetimes of its inference iteration"):
        replay_features(arch, [4], "inference")


def test_an_architecture_with_lifetimes_is_plain_data():
    """No field is a callable and nothing holds the network: the architecture pickles, and a
    copy replays the same; the module it was recorded from is freed."""
    module = _tiny()
    arch = _with_lifetimes(module, input_size=INPUT)
    alive = weakref.ref(module)
    del module
    gc.collect()
    assert alive() is None
    assert not any(callable(getattr(arch, f.name)) for f in dataclasses.fields(arch))
    copy = pickle.loads(pickle.dumps(arch))
    assert copy == arch and copy.lifetimes["training"].same_events(arch.lifetimes["training"])
    assert replay_features(copy, [2, 8], "training").equals(replay_features(arch, [2, 8], "training"))


# the feature set ---------------------------------------------------------------------------

def _timeline(events: list[tuple[int, bool, int, int]]) -> Timeline:
    """A timeline from (tensor, allocates, fixed MiB, MiB per sample) events."""
    tensor, allocates, fixed, per_sample = (np.array(column) for column in zip(*events))
    return Timeline(tensor=tensor.astype(np.int64), allocates=allocates.astype(bool),
                    fixed_bytes=fixed.astype(np.int64) * MIB, per_sample_bytes=per_sample.astype(np.int64) * MIB)


def test_the_peaks_are_running_maxima_over_the_grid_interpolated_between():
    """A grows by 20 MiB a sample, B is 30 MiB: after A is freed, B does not fit in its
    block at one sample (a second segment, 50 MiB reserved) but does from two on (40 MiB):
    the reserved peak falls, the features do not."""
    timeline = _timeline([(0, True, 0, 20), (0, False, 0, 0), (1, True, 30, 0)])
    runs = replays(timeline, [1, 2, 3, 4, 6])
    assert [run.peak_reserved // MIB for run in runs] == [50, 40, 60, 80, 120]
    assert [run.peak_allocated // MIB for run in runs] == [30, 40, 60, 80, 120]
    allocated, cached = replay_peaks(timeline, [1, 2, 3, 4, 5])
    assert (allocated / MIB).tolist() == [30, 40, 60, 80, 100]  # 5 lies halfway between the grid's 4 and 6
    assert (cached / MIB).tolist() == [20, 20, 20, 20, 20]  # what bs 1 cached beyond its live peak, kept
    # beyond the grid's last size (65536), in proportion to the batch size
    allocated, cached = replay_peaks(timeline, [2**17])
    assert (allocated / MIB).tolist() == [2**17 * 20] and (cached / MIB).tolist() == [20 * 2]


def test_the_peaks_never_fall_as_the_batch_size_grows():
    """vgg11's replayed peaks fall at some batch sizes (up to 700 MiB at 224x224); the features do not."""
    timeline = _with_lifetimes("vgg11").lifetimes["training"]
    sizes = list(range(1, 65))
    runs = replays(timeline, sizes)
    raw = np.array([run.peak_reserved for run in runs])
    assert (np.diff(raw) < 0).any()
    allocated, cached = replay_peaks(timeline, sizes)
    assert (np.diff(allocated) >= 0).all() and (np.diff(cached) >= 0).all()
    # at bs 32, a size of the grid, the running maxima over the grid's sizes up to it
    grid = [runs[bs - 1] for bs in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)]
    assert allocated[31] == max(run.peak_allocated for run in grid)
    assert cached[31] == max(run.peak_reserved - run.peak_allocated for run in grid)
    assert replay_peaks(timeline, [32])[0][0] == allocated[31]  # the same whatever else is asked


def test_replay_features_extend_the_network_features_and_grow_with_the_batch_size():
    assert FEATURE_SETS["replay"] is replay_features
    arch = _with_lifetimes("resnet18", input_size=(3, 32, 32), num_classes=10)
    table = replay_features(arch, [4, 16, 64], "training")
    base = network_features(arch, [4, 16, 64], "training")
    assert table.columns.tolist() == [*base.columns, "replay_allocated_bytes", "replay_cached_bytes"]
    assert np.all(np.diff(table["replay_allocated_bytes"]) > 0)
    assert (table["replay_cached_bytes"] >= 0).all()


def test_a_name_and_a_module_of_one_network_replay_the_same():
    from torchvision.models import squeezenet1_0

    by_name = _with_lifetimes("squeezenet1_0", input_size=(3, 32, 32), num_classes=10)
    by_module = _with_lifetimes(squeezenet1_0(num_classes=10), input_size=(3, 32, 32))
    tables = [replay_features(arch, [8], "training") for arch in (by_name, by_module)]
    assert tables[0]["replay_allocated_bytes"].iloc[0] == tables[1]["replay_allocated_bytes"].iloc[0]
    assert tables[0]["replay_cached_bytes"].iloc[0] == tables[1]["replay_cached_bytes"].iloc[0]


@pytest.mark.parametrize("needs", [Detail.LAYER_TABLE, Detail.LAYERS])
def test_a_description_without_lifetimes_cannot_be_replayed(tmp_path, needs):
    create_network_dataset(NetworkDatasetSettings(
        networks=["squeezenet"], pruning_perc=[50], input_size=[3, 32, 32], num_classes=10, model_path=tmp_path,
    ))
    arch = load_architecture(tmp_path / "squeezenet_50.json", needs=needs)
    assert arch.holds(needs) and not arch.holds(Detail.LIFETIMES) and arch.complete == (needs is Detail.LAYERS)
    with pytest.raises(NetworkError, match="squeezenet_50.* needs the tensor lifetimes of its training iteration"):
        replay_features(arch, [4], "training")


# pruned variants: the base's recording, scaled --------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _recorded(spec_path: Path, stage: str) -> Timeline:
    """A fresh recording of a spec's own network, rebuilt."""
    spec = read_spec(spec_path)
    build = functools.partial(build_from_spec, spec, device="meta")
    return record_timeline(build, tuple(spec["input_size"]), int(spec["num_classes"]), stage)


def _scaled_and_recorded(spec_path: Path, stage: str) -> tuple[Timeline, Timeline]:
    """The timeline the replay uses for a spec (its base's, scaled) and a fresh recording of
    the spec's own network, rebuilt."""
    return _with_lifetimes(spec_path, stage).lifetimes[stage], _recorded(spec_path, stage)


@pytest.mark.slow
def test_a_pruned_variant_is_its_bases_recording_scaled(tmp_path, recordings):
    create_network_dataset(NetworkDatasetSettings(
        networks=["resnet18", str(EXAMPLES / "model_files" / "mobilenet_like.py")], pruning_perc=[0, 50, 90],
        input_size=[3, 32, 32], num_classes=10, model_path=tmp_path,
    ))
    specs = sorted(tmp_path.glob("*.json"))
    timelines = [_with_lifetimes(path).lifetimes["training"] for path in specs]
    assert sorted(recordings) == sorted(["resnet18", str(EXAMPLES / "model_files" / "mobilenet_like.py")])  # bases
    for path, scaled in zip(specs, timelines):
        assert scaled.same_events(_recorded(path, "training")), path.name
    # the levels differ, so the scaling did something
    assert len({int(t.per_sample_bytes.sum()) for t in timelines}) == len(specs)


@pytest.mark.slow
def test_a_model_files_other_levels_are_its_first_levels_recording_scaled(tmp_path, monkeypatch, recordings):
    """Model files, pruned levels of one network each, share no base: the first level loaded is
    recorded, the others get its recording scaled (their layers differ in width alone), the
    same events as a recording of their own; a network of other layers is recorded anew."""
    create_network_dataset(NetworkDatasetSettings(
        networks=[str(EXAMPLES / "model_files" / f"{name}.py") for name in ("mobilenet_like", "resnet_like")],
        pruning_perc=[0, 50, 90], input_size=[3, 32, 32], num_classes=10, model_path=tmp_path,
        write_model_files=True,
    ))
    monkeypatch.setenv("PERF4SIGHT_CACHE", "0")
    files = sorted(tmp_path.glob("*.py"))
    assert len(files) == 6
    timelines = {path.stem: _with_lifetimes(path).lifetimes["training"] for path in files}
    assert sorted(recordings) == ["mobilenet_like_0", "resnet_like_0"]
    for path in files:
        module = load_network(path).module
        own = record_timeline(lambda: module, (3, 32, 32), 10, "training")
        assert timelines[path.stem].same_events(own), path.name
    assert len({int(t.per_sample_bytes.sum()) for t in timelines.values()}) == len(files)


def test_a_name_and_its_specs_share_one_recording(tmp_path, monkeypatch):
    create_network_dataset(NetworkDatasetSettings(
        networks=["squeezenet"], pruning_perc=[50], input_size=[3, 32, 32], num_classes=10, model_path=tmp_path,
    ))
    forget_traces()
    recorded = []
    original = lifetimes.record_timeline
    monkeypatch.setattr(lifetimes, "record_timeline", lambda *args: recorded.append(args) or original(*args))
    _with_lifetimes("squeezenet", input_size=(3, 32, 32), num_classes=10)
    assert "training" in _with_lifetimes(tmp_path / "squeezenet_50.json").lifetimes
    assert len(recorded) == 1


def test_a_timeline_that_cannot_be_scaled_is_not_scaled():
    arch = _with_lifetimes("resnet18", input_size=(3, 32, 32), num_classes=10)
    timeline = arch.lifetimes["training"]
    other = load_architecture("squeezenet", input_size=(3, 32, 32), num_classes=10)
    assert lifetimes.resized(timeline, arch, other) is None  # not a propagation of resnet18
    unscaled = Timeline(timeline.tensor, timeline.allocates, timeline.fixed_bytes, timeline.per_sample_bytes)
    assert lifetimes.resized(unscaled, arch, arch) is None


def _each_scaled_as_recorded(specs: list[Path], stage: str) -> None:
    assert len({read_spec(path)["net"] for path in specs}) >= 3
    for path in specs:
        scaled, recorded = _scaled_and_recorded(path, stage)
        assert scaled.same_events(recorded), path.name


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["training", "inference"])
def test_a_pruned_spec_of_each_h200_network_is_its_bases_recording_scaled(h200_dir, stage):
    _each_scaled_as_recorded(sorted((h200_dir / "models").glob("*_60.json")), stage)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["training", "inference"])
def test_every_tx2_spec_is_its_bases_recording_scaled(tx2_dir, stage):
    _each_scaled_as_recorded(sorted((tx2_dir / "models").glob("*.json")), stage)


@pytest.mark.slow
def test_every_demo_spec_is_its_bases_recording_scaled(tmp_path):
    settings = load_section(EXAMPLES / "cpu_demo.ini", "create_network_dataset")
    create_network_dataset(dataclasses.replace(settings, model_path=tmp_path))
    specs = sorted(tmp_path.glob("*.json"))
    assert len(specs) == len(settings.networks) * len(settings.pruning_perc)
    for path in specs:
        scaled, recorded = _scaled_and_recorded(path, "training")
        assert scaled.same_events(recorded), path.name


def test_a_timelines_replays_serve_its_next_query(monkeypatch):
    from perf4sight.features import caching_allocator

    timeline = _timeline([(0, True, 0, 20), (0, False, 0, 0), (1, True, 30, 0)])
    replayed = []
    original = caching_allocator.replays
    monkeypatch.setattr(caching_allocator, "replays", lambda t, sizes: replayed.append(sizes) or original(t, sizes))
    first = replay_peaks(timeline, [5])
    assert replayed == [[1, 2, 3, 4, 6]]  # in one call
    assert [a.tolist() for a in replay_peaks(timeline, [5])] == [a.tolist() for a in first]
    replay_peaks(timeline, [7, 3])
    assert replayed == [[1, 2, 3, 4, 6], [], [8]]  # the second query replays nothing, the third the new size

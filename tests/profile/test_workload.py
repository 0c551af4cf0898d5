"""The torch side of a training recipe (`perf4sight.device.workload`): frozen layers, the
optimizers, autocast and checkpointed segments, on real networks (torchvision's resnet18
at a small input, a plain nn.Sequential), and the same under Python 3.6 + torch 1.10."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch
import torchvision
from old_stacks import OldStack
from torch import nn

import perf4sight.device
from perf4sight.device import workload
from perf4sight.device.backends import DEVICE_TYPES, CpuBackend, CudaBackend, JetsonBackend
from perf4sight.device.errors import ArgumentError
from perf4sight.device.recipe import Recipe

INPUT = (3, 32, 32)


def _resnet18() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def _sequential() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
    )


def _inputs(batch: int = 4) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, *INPUT)


def _steps(model: nn.Module, recipe: Recipe, monkeypatch: pytest.MonkeyPatch, n: int = 2) -> torch.optim.Optimizer:
    """Run `n` training iterations of `model` under `recipe`; returns the optimizer they stepped."""
    made = []
    make = workload.make_optimizer
    monkeypatch.setattr(workload, "make_optimizer", lambda params, r: made.append(make(params, r)) or made[-1])
    step = workload.iteration(model, "training", _inputs(), 10, recipe)
    for _ in range(n):
        step()
    return made[0]


def test_layers_before_the_first_trained_one_get_no_gradients_and_no_optimizer_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _resnet18()
    optimizer = _steps(model, Recipe(trainable="layer4"), monkeypatch)
    frozen = workload.frozen_module_names(model, Recipe(trainable="layer4"))
    assert frozen[:4] == ["conv1", "bn1", "relu", "maxpool"] and "layer3.1.bn2" in frozen
    assert not any(name.startswith(("layer4", "fc")) or name == "" for name in frozen)
    for name, param in model.named_parameters():
        trained = name.startswith(("layer4.", "fc."))
        assert param.requires_grad is trained and (param.grad is not None) is trained, name
        assert (param in optimizer.state) is trained, name
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == {
        id(p) for name, p in model.named_parameters() if name.startswith(("layer4.", "fc."))}


def test_batchnorm_of_the_frozen_part_stays_in_eval_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _resnet18()
    before = model.bn1.running_mean.clone()
    _steps(model, Recipe(trainable="layer3"), monkeypatch)
    norms = {name: m for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    for name, module in norms.items():
        assert module.training is name.startswith(("layer3", "layer4")), name
    assert torch.equal(model.bn1.running_mean, before)  # not updated by the training iterations
    assert not torch.equal(model.layer4[0].bn1.running_mean, torch.zeros(512))


def test_classifier_trains_the_last_layer_only(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _sequential()
    optimizer = _steps(model, Recipe(optimizer="sgd-plain", trainable="classifier"), monkeypatch)
    assert [name for name, p in model.named_parameters() if p.grad is not None] == ["9.weight", "9.bias"]
    assert all(not state.get("momentum_buffer") for state in optimizer.state.values())  # no momentum kept


def test_adam_keeps_two_state_tensors_per_trained_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _sequential()
    for name in ("adam", "adamw"):
        optimizer = _steps(model, Recipe(optimizer=name), monkeypatch)
        assert len(optimizer.state) == len(list(model.parameters()))
        for param, state in optimizer.state.items():
            buffers = [t for t in state.values() if isinstance(t, torch.Tensor) and t.shape == param.shape]
            assert len(buffers) == 2, (name, sorted(state))
        assert optimizer.defaults.get("foreach") in (False, None)  # one parameter at a time
        monkeypatch.undo()


def test_the_default_recipe_is_the_original_sgd_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _sequential()
    optimizer = _steps(model, Recipe(), monkeypatch)
    assert type(optimizer) is torch.optim.SGD
    assert {k: optimizer.defaults[k] for k in workload.SGD_OPTIONS} == workload.SGD_OPTIONS
    assert all(p.grad is not None for p in model.parameters())
    assert all(state["momentum_buffer"].shape == p.shape for p, state in optimizer.state.items())


def test_bf16_autocast_on_the_cpu_runs_convolutions_in_bf16() -> None:
    model = _sequential()
    dtypes = []
    model[3].register_forward_hook(lambda _m, _args, out: dtypes.append(out.dtype))
    step = workload.iteration(model, "training", _inputs(), 10, Recipe(precision="amp-bf16"))
    step()
    workload.iteration(model, "inference", _inputs(), 10, Recipe(precision="amp-bf16"))()
    assert dtypes == [torch.bfloat16, torch.bfloat16]
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    with workload.autocast(Recipe(), "cpu"):
        assert model[3](torch.randn(1, 8, 4, 4)).dtype == torch.float32  # fp32 casts nothing


@pytest.mark.parametrize("network", [_resnet18, _sequential], ids=["resnet18", "sequential"])
def test_checkpointed_segments_compute_what_the_network_does(network) -> None:
    """Same output and same gradients as the unwrapped network (in training mode, so that
    BatchNorm uses the batch's statistics), and the blocks follow the forward pass."""
    plain, checkpointed = network(), network()
    blocks = workload.checkpoint_blocks(checkpointed, _inputs())
    workload.prepare_model(checkpointed, Recipe(checkpoint_segments=4), example=_inputs())
    outputs = []
    for model in (plain, checkpointed):
        model.train()
        output = model(_inputs())
        output.sum().backward()
        outputs.append(output)
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name
    if network is _resnet18:
        assert blocks == ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0", "layer2.1",
                          "layer3.0", "layer3.1", "layer4.0", "layer4.1", "avgpool"]  # flatten, then fc
    else:
        assert blocks == [str(i) for i in range(10)]


def test_checkpointing_keeps_only_segment_boundaries() -> None:
    """The forward pass of a checkpointed network saves fewer tensors for the backward."""
    saved = []
    for segments in (0, 4):
        model = _resnet18()
        workload.prepare_model(model, Recipe(checkpoint_segments=segments), example=_inputs())
        count = [0]

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            count[0] += 1
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(_inputs())
        saved.append(count[0])
    assert saved[1] < saved[0] / 2, saved


def test_a_branch_ends_the_chain_of_blocks() -> None:
    """GoogLeNet's auxiliary classifier reads inception4a's output, which inception4b reads too."""
    model = torchvision.models.googlenet(num_classes=10, aux_logits=True, init_weights=False)
    assert workload.checkpoint_blocks(model, torch.randn(2, 3, 64, 64))[-2:] == ["maxpool3", "inception4a"]


@pytest.mark.parametrize(("recipe", "device", "message"), [
    (Recipe(trainable="layer9"), "cpu", "trainable: no layer 'layer9' in the network; layers there include conv1, bn1, relu"),
    (Recipe(checkpoint_segments=14), "cpu", "checkpoint_segments: 14 segments, the network has 13 top-level blocks"),
    (Recipe(precision="amp-fp16"), "cpu", "precision amp-fp16 needs a CUDA device, not cpu"),
])
def test_a_recipe_the_network_or_device_cannot_run_is_refused(recipe: Recipe, device: str, message: str) -> None:
    with pytest.raises(ArgumentError, match="^" + message.replace("(", r"\(")):
        workload.iteration(_resnet18(), "training", _inputs(), 10, recipe)


@pytest.mark.parametrize(("capability", "refused"), [((6, 2), True), ((7, 5), True), ((8, 0), False), ((9, 0), False)])
def test_bf16_autocast_needs_a_gpu_with_bfloat16_kernels(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int],
                                                         refused: bool) -> None:
    """A TX2 (6.2) or a Turing card (7.5) has no bfloat16 kernels; an Ampere (8.0) or a Hopper (9.0) GPU has."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    for cuda in (CudaBackend, JetsonBackend, DEVICE_TYPES["cuda"]):
        problem = cuda.device_precision_problem("amp-bf16")
        assert (problem == "precision amp-bf16 needs a GPU with bfloat16 kernels (compute capability 8.0 or newer), "
                "not {}.{}".format(*capability)) if refused else problem is None
        assert cuda.device_precision_problem("amp-fp16") is None  # every CUDA GPU computes in fp16
    assert CpuBackend.device_precision_problem("amp-bf16") is None
    assert CpuBackend.device_precision_problem("amp-fp16") == "precision amp-fp16 needs a CUDA device, not cpu"
    if refused:
        with pytest.raises(ArgumentError, match="bfloat16 kernels"):
            workload.autocast(Recipe(precision="amp-bf16"), "cuda")


@pytest.mark.slow
def test_recipes_run_under_python_36_and_torch_1_10(oldest_stack: OldStack, tmp_path: Path) -> None:
    """The device package alone, under the oldest stack: adam + bf16 autocast + classifier
    + 2 checkpointed segments, and every parameter trained with checkpointing and bf16; and
    which model-file factories are given the classes."""
    shutil.copytree(Path(perf4sight.device.__file__).parent, tmp_path / "device")
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from device.recipe import Recipe
        from device import models, workload

        print(models.takes_num_classes(lambda: None), models.takes_num_classes(lambda num_classes=10: None))

        for recipe in (Recipe("adam", "amp-bf16", "classifier", 2), Recipe("adamw", "amp-bf16", "all", 3)):
            torch.manual_seed(0)
            model = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
            dtypes = []
            model[3].register_forward_hook(lambda m, args, out: dtypes.append(out.dtype))
            step = workload.iteration(model, "training", torch.randn(4, 3, 16, 16), 10, recipe)
            step()
            step()
            grads = [name for name, p in model.named_parameters() if p.grad is not None]
            print(recipe.trainable, ",".join(grads), model[1].training, str(dtypes[-1]))
    """))
    done = oldest_stack.run([script], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    factories, *lines = done.stdout.split("\n")[:3]
    assert factories == "False True"
    assert lines[0] == "classifier 7.weight,7.bias False torch.bfloat16"
    assert lines[1].startswith("all 0.weight,0.bias,1.weight,1.bias,3.weight,3.bias,7.weight,7.bias True torch.bfloat16")


def test_a_factory_without_num_classes_is_called_as_the_original_called_it(tmp_path: Path) -> None:
    """The original tool called every factory with no arguments: such a file runs, at the
    classes it builds; a test on a dataset of other classes fails, naming both."""
    from perf4sight.device.backends import make_backend
    from perf4sight.device.models import load_model_file
    from perf4sight.device.test_config import ProfileTest

    path = tmp_path / "classless.py"
    path.write_text("from torch import nn\n\n\ndef classless():\n"
                    "    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))\n")
    backend = make_backend("cpu")
    outcomes = {}
    for dataset in ("cifar10", "imagenet"):
        test = ProfileTest("latency", 2, dataset, "classless", "training", str(path))
        assert load_model_file(test).module[-1].out_features == 10
        outcomes[dataset] = workload.run_test(test, backend, load_model_file, iterations=1, warmup=0)
    assert outcomes["cifar10"].passed and len(outcomes["cifar10"].latency_iters_ms) == 1
    assert not outcomes["imagenet"].passed
    assert outcomes["imagenet"].error == "ModelFileError: the model outputs 10 class scores, not the 1000 asked for"


def test_the_class_scores_are_the_first_tensor_of_the_output_as_the_trace_reads_them() -> None:
    """A model returning {"logits": ...} trains on the device as the host describes it."""
    from perf4sight.architecture import trace_architecture

    class Dict(nn.Module):
        def __init__(self, scores: bool) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 5)
            self.scores = scores

        def forward(self, x: torch.Tensor) -> dict:
            return {"aux": None, "logits": self.fc(x), "features": x} if self.scores else {"aux": None}

    model = Dict(scores=True)
    workload.iteration(model, "training", torch.randn(4, 8), 5)()
    assert model.fc.weight.grad is not None
    assert trace_architecture(model, (8,)).num_classes == 5
    with pytest.raises(perf4sight.device.errors.ModelFileError, match="holds no tensor of class scores: dict"):
        workload.iteration(Dict(scores=False), "training", torch.randn(4, 8), 5)()

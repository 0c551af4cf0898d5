"""One test, run inside the worker: build the model, warm up, time or measure iterations,
training it the way the test's recipe (`recipe.py`) says.

The default recipe's training iteration is the original's: forward, CrossEntropy loss,
backward and an SGD step (lr 0.1, momentum 0.9, weight decay 5e-4). Every optimizer steps
one parameter at a time, as the original's PyTorch ran it on every device (not the
multi-tensor `foreach` kernels that later PyTorch picks on GPUs, which would hold a
temporary copy of every gradient at once rather than of one layer's, a different memory
peak than the TX2's measurements and the models describe). Inference is a forward pass
in eval mode under no_grad. Inputs are random tensors of the model's input size.

Everything here runs on Python 3.6 + PyTorch 1.10 as on current PyTorch.
"""

import contextlib
import inspect
from typing import Any, Callable, ContextManager, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Type

import torch
import torch.utils.checkpoint
from torch import nn

from .backends import DEVICE_TYPES, Backend, MemoryFigures
from .contention import CpuElsewhere
from .errors import ArgumentError, ConfigError, ModelFileError
from .recipe import DEFAULT_RECIPE, PRECISIONS, TRAIN_ALL, TRAIN_CLASSIFIER, Recipe, trainable_problems
from .test_config import ProfileTest

__all__ = [
    "SGD_OPTIONS", "OPTIMIZER_RUNS", "TestOutcome", "autocast", "check_classes", "check_recipes", "checkpoint_blocks",
    "frozen_module_names", "iteration", "make_optimizer", "prepare_model", "recipe_problems", "run_test", "tensors_in",
]

SGD_OPTIONS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}
# Each recipe optimizer's class and options. `sgd` is the original's; `sgd-plain` the same
# without momentum; Adam and AdamW at PyTorch's own defaults (lr 1e-3; AdamW's decoupled
# weight decay 1e-2), the usual fine-tuning settings.
OPTIMIZER_RUNS = {
    "sgd": (torch.optim.SGD, SGD_OPTIONS),
    "sgd-plain": (torch.optim.SGD, {"lr": 0.1, "weight_decay": 5e-4}),
    "adam": (torch.optim.Adam, {"lr": 1e-3}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 1e-2}),
}
# Reentrant checkpointing, the one PyTorch 1.10 has, named where later PyTorch asks.
_REENTRANT = {"use_reentrant": True} if "use_reentrant" in inspect.signature(
    torch.utils.checkpoint.checkpoint).parameters else {}
_ERROR_CHARS = 300
_PROBE_BS = 2  # the batch that finds a network's checkpoint blocks

# test -> an object with `module`, `input_size` (C, H, W) and `num_classes` (`models.py`)
Loader = Callable[[ProfileTest], Any]


class TestOutcome(NamedTuple):
    """What one test produced; `error` is one line when it failed. `cpu_elsewhere` is the
    share of the host's CPU time other processes took while the iterations ran (None
    when they ran too briefly to tell; `contention.py`)."""

    passed: bool
    latency_iters_ms: List[float]
    memory: Optional[MemoryFigures]
    error: Optional[str] = None
    cpu_elsewhere: Optional[float] = None

    def to_json(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "latency_iters_ms": self.latency_iters_ms,
            "memory": None if self.memory is None else dict(self.memory._asdict()),
            "error": self.error,
            "cpu_elsewhere": self.cpu_elsewhere,
        }

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TestOutcome":
        memory = data.get("memory")
        return cls(
            passed=bool(data["passed"]),
            latency_iters_ms=[float(t) for t in data.get("latency_iters_ms", [])],
            memory=None if memory is None else MemoryFigures(**memory),
            error=data.get("error"),
            cpu_elsewhere=data.get("cpu_elsewhere"),
        )


def run_test(test: ProfileTest, backend: Backend, load: Loader, *, iterations: int, warmup: int) -> TestOutcome:
    """Run one test on `backend`, its model built by `load`; any error (out of memory
    included) is a failed outcome.

    A memory test runs in a worker of its own (`campaign.py`) and counts everything from
    the model's construction on, what its first iteration initialises for good (kernels,
    tables, thread pools) included, as a user's training script pays it; the model is built
    once before, and dropped, so that the loader's own work is not counted.
    """
    times: List[float] = []
    error = None
    measuring = False
    elsewhere = CpuElsewhere()
    try:
        if test.test_var == "memory":
            load(test)  # built once and dropped: what loading costs (a spec's pruning graph, a model file's import) is not training's
            backend.memory_begin()  # frees what the build left (`release`) before its idle reading
            measuring = True
        _iterate(test, backend, load, iterations, warmup, times, elsewhere)
    except Exception as exc:  # the model's own code, OOM included: a failed test, not a crash
        error = " ".join("{}: {}".format(type(exc).__name__, exc).split())[:_ERROR_CHARS]
    memory = backend.memory_end() if measuring else None
    backend.release()
    return TestOutcome(passed=error is None, latency_iters_ms=times, memory=memory, error=error,
                       cpu_elsewhere=elsewhere.share)


def _iterate(test: ProfileTest, backend: Backend, load: Loader, iterations: int, warmup: int,
             times: List[float], elsewhere: Optional[CpuElsewhere] = None) -> None:
    """Build and run, the iterations watched by `elsewhere` when given; locals die with this
    frame so that `release()` can free them."""
    network = load(test)
    device = backend.device
    model = network.module.to(device)
    inputs = torch.randn(test.bs, *network.input_size, device=device)
    step = iteration(model, test.stage, inputs, network.num_classes, test.recipe)
    if elsewhere is not None:
        with elsewhere:
            _timed(backend, step, iterations, warmup, times)
    else:
        _timed(backend, step, iterations, warmup, times)


def _timed(backend: Backend, step: Callable[[], None], iterations: int, warmup: int, times: List[float]) -> None:
    for _ in range(warmup):
        step()
    backend.synchronize()
    times.extend(backend.time_ms(step) for _ in range(iterations))


def autocast(recipe: Recipe, device_type: str) -> ContextManager[Any]:
    """The recipe's autocast on `device_type` (`cuda`, `cpu`) as a context manager: a no-op
    for fp32, which every device computes in (the meta device's traces too); ArgumentError
    for a precision the device cannot run (`Backend.device_precision_problem`)."""
    dtype = PRECISIONS[recipe.precision].autocast_dtype
    if dtype is None:
        return contextlib.ExitStack()
    facts = DEVICE_TYPES.get(device_type)
    problem = ("precision {} is not run on device type {}".format(recipe.precision, device_type) if facts is None
               else facts.device_precision_problem(recipe.precision))
    if problem:
        raise ArgumentError(problem)
    return torch.autocast(device_type, dtype=getattr(torch, dtype))


def make_optimizer(params: Iterable[torch.Tensor], recipe: Recipe) -> torch.optim.Optimizer:
    """The recipe's optimizer over `params` (`OPTIMIZER_RUNS`), stepping one parameter at a
    time on every PyTorch (`foreach=False` where the argument exists; before 1.12 there is
    no other loop)."""
    cls, options = OPTIMIZER_RUNS[recipe.optimizer]
    per_parameter = {"foreach": False} if "foreach" in inspect.signature(cls).parameters else {}
    return cls(params, **dict(options, **per_parameter))


def _first_trained(model: nn.Module, trainable: str) -> Optional[str]:
    """The qualified name of the first trained module: None when all are; for `classifier`,
    the last module with parameters of its own (the last nn.Linear, or SqueezeNet's final
    convolution, which is its classifier)."""
    if trainable == TRAIN_ALL:
        return None
    if trainable == TRAIN_CLASSIFIER:
        owners = [name for name, module in model.named_modules() if next(module.parameters(recurse=False), None) is not None]
        return owners[-1] if owners else None
    return trainable


def frozen_module_names(model: nn.Module, recipe: Recipe) -> List[str]:
    """The modules the recipe freezes, qualified names in registration order: every module
    registered before the first trained one (`recipe.trainable`), except the modules that
    contain it; the first trained module and everything registered after it train.
    ArgumentError for a layer name the network lacks."""
    first = _first_trained(model, recipe.trainable)
    if first is None:
        return []
    names = [name for name, _ in model.named_modules()]
    problems = trainable_problems(first, names)
    if problems:
        raise ArgumentError(problems[0])
    ancestors = {first.rsplit(".", i)[0] for i in range(1, first.count(".") + 1)} | {""}
    return [name for name in names[:names.index(first)] if name not in ancestors]


def _block_candidates(model: nn.Module, prefix: str = "") -> List[Tuple[str, nn.Module]]:
    """`model`'s children, each plain nn.Sequential among them replaced by its own (what
    `checkpoint_sequential` would split it into), with qualified names."""
    found = []
    for name, child in model.named_children():
        qualified = prefix + name
        if type(child) is nn.Sequential:
            found.extend(_block_candidates(child, qualified + "."))
        else:
            found.append((qualified, child))
    return found


def checkpoint_blocks(model: nn.Module, example: torch.Tensor) -> List[str]:
    """The blocks checkpointing splits into segments: `model`'s top-level children (a plain
    nn.Sequential among them opened into its own blocks), as far as its forward pass runs
    them as one chain from its first block, each block taking the previous one's output
    and that output going to nothing else.

    For an nn.Sequential this is its children, as `checkpoint_sequential` splits it; for
    networks whose forward pass is not a plain sequence, the chain ends where it stops
    being one (ResNet's and VGG's flatten before the classifier, MobileNetV2's functional
    pooling, GoogLeNet's auxiliary classifier reading inception4a's output). The chain is
    found by running one training-mode forward pass of two samples of `example` under
    no_grad with hooks on the candidates (the model's buffers, BatchNorm statistics, are
    restored after it). Tensors a forward pass combines outside any module (a skip
    connection around whole blocks at the top level) are not seen by the hooks; no
    network profiled here has one.
    """
    candidates = _block_candidates(model)
    calls: List[Tuple[str, Tuple[Any, ...], Any]] = []
    handles = [module.register_forward_hook(lambda _m, args, out, name=name: calls.append((name, args, out)))
               for name, module in candidates]
    saved = [buffer.clone() for buffer in model.buffers()]
    training = model.training
    try:
        model.train()
        with torch.no_grad():
            model(example[:2])
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for buffer, value in zip(model.buffers(), saved):
                buffer.copy_(value)
        model.train(training)
    chain: List[str] = []
    for k, (name, args, out) in enumerate(calls):
        single = len(args) == 1 and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor)
        if not single or name in chain or (chain and args[0] is not calls[k - 1][2]):
            break
        chain.append(name)
        if any(_reads(args_j, out) and calls[j - 1][2] is not out  # not passed on in place
               for j, (_, args_j, _) in enumerate(calls) if j > k + 1):
            break  # a branch reads the output too: the chain cannot go past it
    return chain


def _reads(args: Tuple[Any, ...], tensor: torch.Tensor) -> bool:
    return any(arg is tensor for arg in args)


def recipe_problems(model: nn.Module, recipe: Recipe, blocks: Sequence[str] = (),
                    network: str = "the network") -> List[str]:
    """Why `recipe` cannot train `model` (named `network` in the messages;
    `trainable_problems`): a layer name it lacks, more checkpoint segments than it has
    `blocks` (`checkpoint_blocks`; needed when the recipe checkpoints). Empty when it can."""
    names = [name for name, _ in model.named_modules()]
    trainable = _first_trained(model, recipe.trainable) or TRAIN_ALL
    return trainable_problems(trainable, names, max(1, len(blocks)), recipe.checkpoint_segments, network)


def check_recipes(tests: Sequence[ProfileTest], load: Loader, backend: Type[Backend]) -> None:
    """Refuse, before any test, a recipe the device (`backend.device_precision_problem`) or a test's network
    (`recipe_problems`) cannot run: such a test would fail without measuring anything, and
    its failure, journalled, would never be retried. Each network that a recipe names a
    layer of or checkpoints is built once, by `load`. ConfigError names the test config's model."""
    needs_network: Dict[Tuple[str, str, str], List[ProfileTest]] = {}
    for test in tests:
        problem = backend.device_precision_problem(test.recipe.precision)
        if problem:
            raise ConfigError("test config: model {}: {}".format(test.model, problem))
        if test.recipe.trainable not in (TRAIN_ALL, TRAIN_CLASSIFIER) or test.recipe.checkpoint_segments:
            needs_network.setdefault((test.model, test.dataset, test.net_name), []).append(test)
    for (model, _, net_name), group in needs_network.items():
        network = load(group[0])
        recipes = dict.fromkeys(test.recipe for test in group)
        blocks = checkpoint_blocks(network.module, torch.randn(_PROBE_BS, *network.input_size)) \
            if any(recipe.checkpoint_segments for recipe in recipes) else []
        for recipe in recipes:
            problems = recipe_problems(network.module, recipe, blocks, network=net_name)
            if problems:
                raise ConfigError("test config: model {}: {}".format(model, problems[0]))


def prepare_model(model: nn.Module, recipe: Recipe, example: Optional[torch.Tensor] = None) -> nn.Module:
    """`model` made ready for the recipe's training, in place; returns the module to run.

    Frozen modules (`frozen_module_names`) get requires_grad False, so they keep no
    gradients and the optimizer (built over the parameters that require them) no state.
    With `checkpoint_segments` n > 0 the blocks (`checkpoint_blocks`, found on `example`)
    are split as `torch.utils.checkpoint.checkpoint_sequential` splits them: n segments of
    len // n blocks, the last taking the rest and running normally, each other one
    checkpointed (reentrant, the kind PyTorch 1.10 has) so that it keeps only its input
    and recomputes its forward pass in the backward. The first block of a segment runs
    the whole segment and the others pass their input through, so the model's forward
    and its module names stay as they are. ArgumentError for what the recipe cannot do
    with this network (`recipe_problems`).
    """
    blocks: List[str] = []
    if recipe.checkpoint_segments:
        if example is None:
            raise ValueError("checkpointing needs an example input to find the network's blocks")
        blocks = checkpoint_blocks(model, example)
    problems = recipe_problems(model, recipe, blocks)
    if problems:
        raise ArgumentError(problems[0])
    for name in frozen_module_names(model, recipe):
        for param in _module(model, name).parameters(recurse=False):
            param.requires_grad_(False)
    if recipe.checkpoint_segments:
        modules = [_module(model, name) for name in blocks]
        size = max(1, len(modules) // recipe.checkpoint_segments)  # 1 for a network without a chain: none
        for start in range(0, size * (recipe.checkpoint_segments - 1), size):
            _checkpoint_segment(modules[start:start + size], recipe, example.device.type)
    return model


def _module(model: nn.Module, name: str) -> nn.Module:
    """The submodule of qualified `name` (PyTorch 1.10 has `get_submodule`, 1.8 not)."""
    for part in name.split(".") if name else ():
        model = getattr(model, part)
    return model


def _checkpoint_segment(modules: Sequence[nn.Module], recipe: Recipe, device_type: str) -> None:
    """Make the first of `modules` run all of them as one checkpointed segment, the others
    pass their input through (a segment no backward pass reaches, frozen and fed a
    tensor needing no gradient, just runs). The segment runs under the recipe's autocast
    itself, as PyTorch 1.10's recomputation restores CUDA's autocast only. A segment whose input
    needs no gradient but that holds trained parameters takes an empty tensor that does,
    so that its output does too and the backward pass reaches them. A segment that starts
    with an in-place module (a ReLU) works on a copy of its input: the input is what the
    checkpoint keeps to recompute from."""
    forwards = [module.forward for module in modules]
    trained = any(p.requires_grad for module in modules for p in module.parameters())
    needs_grad = torch.empty(0, requires_grad=True)
    in_place = bool(getattr(modules[0], "inplace", False))

    def run(x: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        if in_place:
            x = x.clone()
        with autocast(recipe, device_type):
            for forward in forwards:
                x = forward(x)
        return x

    def segment(x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not (trained or x.requires_grad):
            return run(x)  # no backward pass reaches it: nothing to keep or recompute
        extra = (needs_grad,) if trained and not x.requires_grad else ()
        return torch.utils.checkpoint.checkpoint(run, x, *extra, **_REENTRANT)

    modules[0].forward = segment
    for module in modules[1:]:
        module.forward = _passthrough


def _passthrough(x: torch.Tensor) -> torch.Tensor:
    return x


def _grad_scaler(recipe: Recipe, device_type: str) -> Optional[Any]:
    """fp16's gradient scaler on `device_type` (a `Backend.grad_scaler` device, checked by
    `autocast`), None where the precision needs none."""
    if not PRECISIONS[recipe.precision].grad_scaler:
        return None
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type)
    return torch.cuda.amp.GradScaler()  # PyTorch before 2.3 has CUDA's alone


def tensors_in(obj: Any) -> List[torch.Tensor]:
    """The tensors in an op's arguments or outputs (nested lists, tuples and dicts), in order:
    a network's class scores are the first of its output's (GoogLeNet's auxiliary outputs, a
    model returning {"logits": ...}), here and in the host's trace."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []


def check_classes(scores: int, num_classes: int) -> None:
    """Refuse a network that outputs another number of class scores than asked for: what
    would be described or measured is not the network trained."""
    if scores != num_classes:
        raise ModelFileError("the model outputs {} class scores, not the {} asked for".format(scores, num_classes))


def iteration(model: nn.Module, stage: str, inputs: torch.Tensor, num_classes: int,
              recipe: Recipe = DEFAULT_RECIPE) -> Callable[[], None]:
    """One iteration of `stage` on `inputs` under `recipe`, as a function to call repeatedly:
    what is measured (and what `perf4sight.architecture.lifetimes` records on the meta device).

    Inference is a forward pass in eval mode under no_grad (and the recipe's autocast).
    Training prepares `model` for the recipe (`prepare_model`: frozen layers, checkpointed
    segments), puts it in training mode but the frozen BatchNorm layers in eval mode, and
    each call runs the forward pass and the CrossEntropy loss under the recipe's autocast,
    clears the gradients, backpropagates (through fp16's gradient scaler) and steps the
    recipe's optimizer over the trained parameters; or, with the recipe's `zero_grad` first,
    clears the gradients before the forward pass.

    Gradients are cleared with `zero_grad(set_to_none=True)` on every PyTorch: PyTorch 2's
    default, which every measurement on a current PyTorch ran, where PyTorch 1.10's default
    zeroed them in place. Cleared after the loss (the original's order), the previous step's
    gradients are held through the forward pass either way; to None, the backward pass
    stores each new gradient where in place it computed it and added it to the old one, so
    on PyTorch 1.10 the peak is one layer's gradient lower than the original's (9.5 MiB of
    ResNet-18's 162 MiB at batch size 8 on the CPU).
    """
    device_type = inputs.device.type
    autocast(recipe, device_type)  # refuses a precision the device lacks when called: before anything runs
    if stage == "inference":
        model.eval()

        def infer() -> None:
            with torch.no_grad(), autocast(recipe, device_type):
                model(inputs)

        return infer
    run = prepare_model(model, recipe, example=inputs)
    model.train()
    for name in frozen_module_names(model, recipe):
        module = _module(model, name)
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.eval()
    targets = torch.randint(num_classes, (inputs.shape[0],), device=inputs.device)
    criterion = nn.CrossEntropyLoss()
    optimiser = make_optimizer([p for p in model.parameters() if p.requires_grad], recipe)
    scaler = _grad_scaler(recipe, device_type)

    def train() -> None:
        if recipe.clears_gradients_first:
            optimiser.zero_grad(set_to_none=True)
        with autocast(recipe, device_type):
            output = run(inputs)
            scores = tensors_in(output)
            if not scores:
                raise ModelFileError("the model's output holds no tensor of class scores: {}".format(
                    type(output).__name__))
            check_classes(scores[0].shape[-1], num_classes)  # else a CUDA assert, which spoils the worker's later tests
            loss = criterion(scores[0], targets)
        if not recipe.clears_gradients_first:
            optimiser.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimiser.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimiser)
            scaler.update()

    return train

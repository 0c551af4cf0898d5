"""The training recipe, one definition: the optimizer, the precision, which layers are
trained, how activations are checkpointed and where the step clears the gradients.

Memory and time per iteration depend on how a network is trained as much as on the
network: Adam keeps two state tensors per parameter where SGD with momentum keeps one,
autocast halves the bytes of what it casts, frozen layers keep no gradients, and
checkpointed segments keep only their boundaries and recompute their forward pass in
the backward, and a step that clears the gradients before the forward pass holds none of
the last step's through it. The profiler runs a recipe, its logs record it, the features
follow it and the predictor takes it; all of them read these names and facts from here.
The default (`Recipe()`) is the original tool's training: SGD with momentum and weight
decay, fp32, every parameter trained, nothing recomputed, the gradients cleared after the
loss.

Plain data, the standard library only (it runs on the device, Python 3.6).
"""

from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Type

from .errors import ArgumentError, clip

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "TRAIN_ALL",
    "TRAIN_CLASSIFIER",
    "ZERO_GRAD_ORDERS",
    "RECIPE_COLUMNS",
    "Recipe",
    "DEFAULT_RECIPE",
    "check_recipe",
    "trainable_problems",
]


class Optimizer(NamedTuple):
    """What an optimizer keeps and does per trained parameter."""

    state_buffers: int  # tensors of the parameter's size kept between steps (momentum; Adam's two moments)
    momentum: bool
    # Parameter-sized tensors a step reads or writes per trained parameter (one parameter at
    # a time, `foreach` off), and how many parameter-sized temporaries it holds at once.
    passes: int
    temporaries: int
    # The kernels its step runs per parameter: optimizers of one kind cost alike per pass (SGD
    # with or without momentum; Adam with or without decoupled weight decay).
    step: str


# name -> its facts; `sgd` is the original's (lr 0.1, momentum 0.9, weight decay 5e-4).
OPTIMIZERS: Dict[str, Optimizer] = {
    # the decayed gradient (2 in, 1 out), the momentum buffer scaled (1 in, 1 out) and
    # accumulated (2 in, 1 out), the weights updated (2 in, 1 out); the decayed gradient
    # is its temporary
    "sgd": Optimizer(state_buffers=1, momentum=True, passes=11, temporaries=1, step="sgd"),
    "sgd-plain": Optimizer(state_buffers=0, momentum=False, passes=6, temporaries=1, step="sgd"),
    "adam": Optimizer(state_buffers=2, momentum=False, passes=19, temporaries=2, step="adam"),
    "adamw": Optimizer(state_buffers=2, momentum=False, passes=21, temporaries=2, step="adam"),
}


class Precision(NamedTuple):
    """How an iteration computes: autocast's dtype (None: fp32) and whether a gradient
    scaler runs (fp16's narrow range needs one; bf16's does not)."""

    autocast_dtype: object  # a torch dtype name ("float16", "bfloat16") or None
    grad_scaler: bool
    bytes_per_cast_value: int


PRECISIONS: Dict[str, Precision] = {
    "fp32": Precision(autocast_dtype=None, grad_scaler=False, bytes_per_cast_value=4),
    "amp-fp16": Precision(autocast_dtype="float16", grad_scaler=True, bytes_per_cast_value=2),
    "amp-bf16": Precision(autocast_dtype="bfloat16", grad_scaler=False, bytes_per_cast_value=2),
}

# `trainable`: every parameter, the last Linear layer only, or else the qualified name of
# the first trained module (everything before it, in the order the network registers its
# modules, frozen).
TRAIN_ALL = "all"
TRAIN_CLASSIFIER = "classifier"

# Where a step clears the gradients (to None): after the loss, before the backward pass (the
# original tool's loop: the last step's gradients are held through the forward pass), or
# first, before the forward pass (PyTorch's tutorials' loop, or right after the step: none is
# held through it, and the peak is lower by the gradients the backward pass has not yet made
# again when it comes).
ZERO_GRAD_ORDERS = ("after-loss", "first")


class Recipe(NamedTuple):
    """How a network is trained. `checkpoint_segments` 0 recomputes nothing; n > 0 splits
    the network's top-level blocks into n segments, as `torch.utils.checkpoint.checkpoint_sequential`
    does, each keeping only its input for the backward pass."""

    optimizer: str = "sgd"
    precision: str = "fp32"
    trainable: str = TRAIN_ALL
    checkpoint_segments: int = 0
    zero_grad: str = ZERO_GRAD_ORDERS[0]

    @property
    def is_default(self) -> bool:
        """Whether this is the original tool's training (what logs without recipe columns ran)."""
        return self == DEFAULT_RECIPE

    @property
    def clears_gradients_first(self) -> bool:
        """Whether a step clears the gradients before its forward pass (`ZERO_GRAD_ORDERS`)."""
        return self.zero_grad == ZERO_GRAD_ORDERS[1]

    def label(self) -> str:
        """One short line naming the recipe, for messages, reports and plots."""
        parts = [self.optimizer, self.precision, "train " + self.trainable]
        if self.checkpoint_segments:
            parts.append("checkpoint {} segments".format(self.checkpoint_segments))
        if self.zero_grad != DEFAULT_RECIPE.zero_grad:
            parts.append("zero_grad " + self.zero_grad)
        return ", ".join(parts)

    def columns(self) -> Dict[str, object]:
        """The recipe's log columns (`RECIPE_COLUMNS`) with its values."""
        return dict(zip(RECIPE_COLUMNS, self))

    @classmethod
    def from_columns(cls, values: Mapping[str, object], where: str = "recipe",
                     error: Type[Exception] = ArgumentError) -> "Recipe":
        """The recipe of a log row or a test's params: a column that is absent or None
        (a log of the original, which ran the default) takes the default's value; checked
        by `check_recipe`."""
        given = {key: values[key] for key in RECIPE_COLUMNS if values.get(key) is not None}
        return check_recipe(DEFAULT_RECIPE._replace(**given), where, error)

    def for_stage(self, stage: str) -> "Recipe":
        """What of the recipe a stage runs: inference trains nothing, so only its precision counts."""
        return self if stage == "training" else Recipe(precision=self.precision)


DEFAULT_RECIPE = Recipe()
# A log row's recipe, in columns after the original tool's (a log without them ran the default).
RECIPE_COLUMNS = Recipe._fields


def check_recipe(recipe: Recipe, where: str = "recipe", error: Type[Exception] = ArgumentError) -> Recipe:
    """`recipe` if each of its values is known (a layer name is checked against a network
    where one is built, `trainable_problems`); else `error` naming `where` (none when empty)
    and the key."""
    prefix = where + " " if where else ""
    checks = (
        ("optimizer", recipe.optimizer, OPTIMIZERS),
        ("precision", recipe.precision, PRECISIONS),
        ("zero_grad", recipe.zero_grad, ZERO_GRAD_ORDERS),
    )
    for key, value, known in checks:
        if value not in known:
            raise error("{}{}: unknown value {}; expected one of {}".format(
                prefix, key, clip(repr(value)), ", ".join(known)))
    if not isinstance(recipe.trainable, str) or not recipe.trainable.strip():
        raise error("{}trainable: {} is not '{}', '{}' or a layer name".format(
            prefix, clip(repr(recipe.trainable)), TRAIN_ALL, TRAIN_CLASSIFIER))
    segments = recipe.checkpoint_segments
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 0:
        raise error("{}checkpoint_segments: {} is not 0 (none) or a positive integer".format(
            prefix, clip(repr(segments))))
    return recipe


def trainable_problems(trainable: str, module_names: Sequence[str], n_blocks: int = 0,
                       segments: int = 0, network: str = "the network") -> List[str]:
    """Why a recipe cannot train a network whose modules are `module_names` (qualified,
    in registration order) and which has `n_blocks` top-level blocks: a layer name that is
    not one of its modules, or more checkpoint segments than blocks. Empty when it can."""
    problems = []
    if trainable not in (TRAIN_ALL, TRAIN_CLASSIFIER) and trainable not in module_names:
        near = [name for name in module_names if name.startswith(trainable.split(".")[0])]
        near = (near or [name for name in module_names if name and "." not in name])[:8]  # else the top level
        problems.append("trainable: no layer {} in {}{}".format(
            clip(repr(trainable)), network, "; layers there include " + ", ".join(near) if near else ""))
    if segments > n_blocks > 0:
        problems.append("checkpoint_segments: {} segments, {} has {} top-level blocks".format(
            segments, network, n_blocks))
    return problems

"""Standalone model description files: a pruned network as Python that needs only torch.

The file can be copied to a device without perf4sight and loaded like the original
tool's model files: its factory, named after the network, builds the pruned module
from plain `torch.nn` layers. The forward pass is the one torch.fx records (in-place
arithmetic kept in place); the layers keep their qualified names, so a state dict of the
pruned module loads into it.
"""

from __future__ import annotations

import ast
import inspect
import operator
import re
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch import nn

from perf4sight.errors import NetworkError
from perf4sight.files import write_text

__all__ = ["CHECKED_STACKS", "model_file_source", "write_model_file"]

# (Python, PyTorch) releases on which the tests build and train model files and run the
# device side (tests/old_stacks.py): JetPack 4.6's and JetPack 5's. Model files name them.
CHECKED_STACKS = (("3.6", "1.10.2"), ("3.8", "1.12.1"))

# Names torch.fx's generated code may use, and how the file provides them.
_PREAMBLE = {
    "torch": "",
    "device": "from torch import device",
    "inf": 'inf = float("inf")',
    "nan": 'nan = float("nan")',
    "NoneType": "NoneType = type(None)",
}

_HELPERS = '''

def _place(root: nn.Module, path: str, value: Any, buffer: bool = False) -> None:
    """Put a layer, parameter or buffer at a dotted path, creating containers on the way."""
    *parents, last = path.split(".")
    for part in parents:
        if part not in root._modules:
            root.add_module(part, nn.Module())
        root = root._modules[part]
    if buffer:
        root.register_buffer(last, value)
    else:
        setattr(root, last, value)
'''


def _argument_value(layer: nn.Module, param: inspect.Parameter, name: str) -> Any:
    """The value a layer was built with, read from the attribute named like the argument.

    A boolean argument held as a tensor or None (Conv2d's `bias`) is whether the tensor exists.
    """
    if not hasattr(layer, param.name):
        raise NetworkError(f"layer '{name}' ({type(layer).__name__}) keeps no attribute for its argument '{param.name}'")
    value = getattr(layer, param.name)
    if isinstance(param.default, bool) and (value is None or isinstance(value, torch.Tensor)):
        return value is not None
    if isinstance(value, list):
        value = tuple(value)
    try:
        if ast.literal_eval(repr(value)) == value:
            return value
    except (ValueError, SyntaxError):
        pass
    raise NetworkError(f"layer '{name}' ({type(layer).__name__}) has argument {param.name}={value!r}, which is not a literal")


def _build_layer(cls: type[nn.Module], positional: list[Any], keywords: dict[str, Any]) -> nn.Module | None:
    """The layer built from these arguments on the meta device, None where they are refused."""
    try:
        with torch.device("meta"):
            return cls(*positional, **keywords)
    except Exception:
        return None


def _same_layer(a: nn.Module | None, b: nn.Module) -> bool:
    """Same settings (extra_repr) and same parameter and buffer shapes."""
    if a is None or a.extra_repr() != b.extra_repr():
        return False
    return {k: tuple(v.shape) for k, v in a.state_dict().items()} == {k: tuple(v.shape) for k, v in b.state_dict().items()}


def _layer_code(layer: nn.Module, name: str, classifier: str | None) -> str:
    """Constructor call for one leaf layer; the classifier's outputs become `num_classes`.

    Required arguments are written positionally; an optional argument only where the layer
    built without it differs. So a default the host's PyTorch added later (BatchNorm2d's
    `bias`, GELU's `approximate`) is left out and the call runs on older releases.
    """
    cls = type(layer)
    if getattr(nn, cls.__name__, None) is not cls:
        raise NetworkError(f"layer '{name}' is a {cls.__module__}.{cls.__name__}, not a torch.nn layer")
    params = [
        p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("device", "dtype")
    ]
    positional = [_argument_value(layer, p, name) for p in params if p.default is p.empty]
    keywords = {p.name: _argument_value(layer, p, name) for p in params if p.default is not p.empty}
    for key in list(keywords):
        fewer = {k: v for k, v in keywords.items() if k != key}
        if _same_layer(_build_layer(cls, positional, fewer), layer):
            keywords = fewer
    if not _same_layer(_build_layer(cls, positional, keywords), layer):
        raise NetworkError(f"layer '{name}' ({cls.__name__}) is not rebuilt by its constructor's arguments")
    args = [repr(v) for v in positional] + [f"{k}={v!r}" for k, v in keywords.items()]
    if name == classifier:
        args[1] = "num_classes"  # Conv2d's out_channels, Linear's out_features
    return f"nn.{cls.__name__}({', '.join(args)})"


class _InPlaceProxy(torch.fx.Proxy):
    """A torch.fx proxy that records `a += b` as the in-place op it is, where torch.fx's own
    records `a = a + b`: the device must run what the network's spec describes (an in-place
    residual addition makes no new tensor)."""

    def _in_place(self, op: Any, other: Any) -> torch.fx.Proxy:
        return self.tracer.create_proxy("call_function", op, (self, other), {})

    def __iadd__(self, other: Any) -> torch.fx.Proxy:
        return self._in_place(operator.iadd, other)

    def __isub__(self, other: Any) -> torch.fx.Proxy:
        return self._in_place(operator.isub, other)

    def __imul__(self, other: Any) -> torch.fx.Proxy:
        return self._in_place(operator.imul, other)

    def __itruediv__(self, other: Any) -> torch.fx.Proxy:
        return self._in_place(operator.itruediv, other)


class _Tracer(torch.fx.Tracer):
    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        return _InPlaceProxy(node, self)


def model_file_source(module: nn.Module, *, net: str, name: str, num_classes: int, input_size: Any) -> str:
    """The Python source of a standalone model file whose factory `net` rebuilds `module`."""
    if not net.isidentifier():
        raise NetworkError(f"cannot write a model file for '{net}': the factory name must be a Python identifier")
    try:
        graph = _Tracer().trace(module)
    except Exception as exc:
        raise NetworkError(f"cannot write a model file for {name}: torch.fx cannot trace it: {type(exc).__name__}: {exc}") from exc
    for node in graph.nodes:
        node.type = None  # annotations could name classes outside torch
    code = graph.python_code(root_module="self")
    for global_name in code.globals:
        if global_name not in _PREAMBLE and re.search(rf"\b{re.escape(global_name)}\b", code.src):
            raise NetworkError(f"cannot write a model file for {name}: its forward uses '{global_name}', which is not torch")
    layers = [n.target for n in graph.nodes if n.op == "call_module"]
    classifier = next(
        (t for t in reversed(layers) if isinstance(module.get_submodule(t), (nn.Conv2d, nn.Linear))), None
    )
    lines = []
    for target in dict.fromkeys(layers):
        try:
            lines.append(f"_place(self, {target!r}, {_layer_code(module.get_submodule(target), target, classifier)})")
        except NetworkError as exc:
            raise NetworkError(f"cannot write a model file for {name}: {exc}") from None
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    for target in dict.fromkeys(n.target for n in graph.nodes if n.op == "get_attr"):
        if target in params:
            shape = tuple(params[target].shape)
            lines.append(f"_place(self, {target!r}, nn.Parameter(torch.zeros({shape})))")
        elif target in buffers:
            shape = tuple(buffers[target].shape)
            lines.append(f"_place(self, {target!r}, torch.zeros({shape}), buffer=True)")
        else:
            raise NetworkError(f"cannot write a model file for {name}: it uses a constant tensor '{target}'")
    preamble = [_PREAMBLE[g] for g in _PREAMBLE if g in code.globals and _PREAMBLE[g] and re.search(rf"\b{g}\b", code.src)]
    forward = "\n".join("    " + line if line.strip() else "" for line in code.src.strip("\n").splitlines())
    init = "\n".join("        " + line for line in lines)
    size = "x".join(str(s) for s in input_size)
    checked = " and ".join(f"Python {py} + PyTorch {pt}" for py, pt in CHECKED_STACKS)
    return (
        f'"""{name}: a pruned {net} for {size} inputs, written by perf4sight; it needs only torch.\n\n'
        f"Build it with `{net}(num_classes={num_classes})`. Written with PyTorch {torch.__version__};\n"
        f"model files are checked to build and train on {checked}.\n"
        '"""\n\n'
        "from typing import Any\n\n"
        "import torch\n"
        "from torch import nn\n"
        + "".join(line + "\n" for line in preamble)
        + _HELPERS
        + "\n\nclass PrunedNetwork(nn.Module):\n"
        f"    def __init__(self, num_classes: int = {num_classes}) -> None:\n"
        "        super().__init__()\n"
        f"{init}\n\n"
        f"{forward}\n\n\n"
        f"def {net}(num_classes: int = {num_classes}) -> nn.Module:\n"
        f'    """The pruned {net} ({name})."""\n'
        "    return PrunedNetwork(num_classes)\n"
    )


def _check_source(source: str, module: nn.Module, *, net: str, name: str, num_classes: int) -> None:
    """Build the file's network on the meta device and compare every parameter's shape."""
    namespace: dict[str, Any] = {"__name__": f"_perf4sight_check_{net}"}
    try:
        exec(compile(source, f"<{name}.py>", "exec"), namespace)  # our own generated code, never user text
        with torch.device("meta"):
            rebuilt = namespace[net](num_classes=num_classes)
    except Exception as exc:
        raise NetworkError(f"cannot write a model file for {name}: it does not rebuild: {type(exc).__name__}: {exc}") from exc
    want = {k: tuple(v.shape) for k, v in module.named_parameters()}
    got = {k: tuple(v.shape) for k, v in rebuilt.named_parameters()}
    if want != got:
        differing = sorted(set(want.items()) ^ set(got.items()))
        raise NetworkError(f"cannot write a model file for {name}: the rebuilt network differs at {differing[0][0]}")


def write_model_file(
    module: nn.Module, path: str | Path, *, net: str, name: str, num_classes: int, input_size: Any
) -> Path:
    """Write the standalone model file for `module` after checking that it rebuilds it."""
    source = model_file_source(module, net=net, name=name, num_classes=num_classes, input_size=input_size)
    _check_source(source, module, net=net, name=name, num_classes=num_classes)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, source)
    return path

"""The device's model loader: a standalone model file (`.py`, needing only torch) whose
factory is named after the network, as the original tool loaded its models.

The host injects its own loader instead (`perf4sight.profile.models`: specs,
torchvision names), by name, so that nothing here imports the host. A loader is a
function `test -> LoadedModel` named as `module:function`.
"""

import importlib
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple, Union

from torch import nn

from .errors import ConfigError, ModelFileError
from .files import file_digest
from .definitions import DATASETS, is_positive_int
from .test_config import ProfileTest

__all__ = [
    "LoadedModel", "call_factory", "check_against_spec", "check_model_files", "exec_model_file", "import_loader", "load_model_file",
    "model_digest", "spec_digest", "spec_shape", "split_model_source", "takes_num_classes", "test_shape",
]


class LoadedModel(NamedTuple):
    """A model ready to run and the input it takes."""

    module: nn.Module
    input_size: Tuple[int, int, int]
    num_classes: int


def split_model_source(source: Union[str, Path]) -> Tuple[Path, Optional[str]]:
    """A model entry `file.py:factory` -> (file.py, factory); `file.py` -> (file.py, None)."""
    text = str(source)
    match = re.fullmatch(r"(.+\.py):(\w+)", text)
    if match:
        return Path(match.group(1)), match.group(2)
    return Path(text), None


def model_digest(model: str) -> Optional[str]:
    """The SHA-256 of the file a test's `model` entry names (a model file or a spec; None for
    a name that is no file, a torchvision builder's): what a log row was measured from,
    wherever the file lay."""
    path = split_model_source(model)[0]
    return file_digest(path) if path.is_file() else None


def spec_digest(model: str) -> Optional[str]:
    """The SHA-256 of the spec a test's model is: the entry itself, or the `<stem>.json`
    beside its model file (None where there is none), which the host's fit finds by name."""
    path = split_model_source(model)[0]
    return model_digest(str(path.with_suffix(".json")))


def test_shape(test: ProfileTest) -> Optional[Tuple[Tuple[int, int, int], int]]:
    """The input size and classes `test` runs at: its dataset's, or for `spec` those of the
    spec `<stem>.json` beside its model (None when there is none: the model's own)."""
    shape = DATASETS[test.dataset]
    if shape is not None:
        return shape
    return spec_shape(split_model_source(test.model)[0].with_suffix(".json"))


def spec_shape(spec_path: Path) -> Optional[Tuple[Tuple[int, int, int], int]]:
    """The input size and classes of the spec at `spec_path` (None when there is none): a
    model file written with its spec is for that size."""
    if not spec_path.is_file():
        return None
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        size, classes = tuple(spec["input_size"]), spec["num_classes"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError("{}: no input_size and num_classes to read ({})".format(spec_path, exc)) from None
    if len(size) != 3 or not all(is_positive_int(s) for s in size) or not is_positive_int(classes):
        raise ConfigError("{}: input_size {!r} and num_classes {!r} are not positive integers".format(
            spec_path, list(size), classes))
    return (int(size[0]), int(size[1]), int(size[2])), int(classes)


def load_model_file(test: ProfileTest) -> LoadedModel:
    """Build `test`'s model by calling its file's factory (named after the network) with
    the classes the test runs at (where it takes them: `call_factory`)."""
    path, factory = split_model_source(test.model)
    shape = test_shape(test)
    if shape is None:
        raise ConfigError(_no_shape(test))
    if not path.is_file():
        raise ModelFileError("model description file not found: {}".format(path))
    name = factory or test.net_name
    function = getattr(exec_model_file(path), name, None)
    if not callable(function):
        raise ModelFileError("{}: no factory function '{}'".format(path, name))
    return LoadedModel(call_factory(path, function, num_classes=shape[1]), shape[0], shape[1])


def _no_shape(test: ProfileTest) -> str:
    path = split_model_source(test.model)[0]
    return ("test config: model {}: dataset 'spec' takes the input size from {} beside it, which is "
            "missing; list the spec there or name a dataset ({})".format(
                path, path.with_suffix(".json").name, ", ".join(d for d in DATASETS if d != "spec")))


def exec_model_file(path: Path) -> ModuleType:
    """Import the model file `path` by its path (it needs no package around it), its folder
    first on the import path while it runs, as Python runs a script (a module beside it
    imports); any error in it is one ModelFileError naming the file. The host's model files
    load through it too."""
    module_name = "_perf4sight_model_{}".format(abs(hash(str(path.resolve()))))
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ModelFileError("{}: cannot be imported as a Python file".format(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any error in the file becomes one line naming it
        sys.modules.pop(module_name, None)
        raise ModelFileError("{}: import failed: {}: {}".format(path, type(exc).__name__, exc)) from exc
    finally:
        sys.path.remove(folder)
    return module


def takes_num_classes(function: Callable[..., Any]) -> bool:
    """Whether a factory can be given `num_classes`: a parameter of that name, or `**kwargs`
    (a callable whose signature cannot be read is given it)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind == p.VAR_KEYWORD or (p.name == "num_classes" and p.kind != p.POSITIONAL_ONLY)
               for p in parameters)


def call_factory(path: Path, function: Callable[..., Any], num_classes: Optional[int] = None) -> nn.Module:
    """The network of `function`, the factory of the model file `path`, for `num_classes`
    where the factory takes them; one without that parameter is called with no arguments, as
    the original tool called every factory, and builds the classes it builds. Checked to
    build a module; errors name the file."""
    kwargs = {"num_classes": num_classes} if num_classes is not None and takes_num_classes(function) else {}
    try:
        module = function(**kwargs)
    except Exception as exc:
        raise ModelFileError("{}: factory {}() failed: {}: {}".format(
            path, function.__name__, type(exc).__name__, exc)) from exc
    if not isinstance(module, nn.Module):
        raise ModelFileError("{}: factory {}() returned {}, not an nn.Module".format(
            path, function.__name__, type(module).__name__))
    return module


def check_model_files(tests: Sequence[ProfileTest]) -> None:
    """Refuse, before any test, models this loader cannot build, or that are not the network
    of the spec beside them: a test that would fail without measuring anything, journalled,
    would never be retried once the file is fixed, and one of another network would be
    logged under the spec's name."""
    for test in {(t.model, t.dataset): t for t in tests}.values():
        path = split_model_source(test.model)[0]
        if path.suffix != ".py":
            raise ConfigError("test config: model {}: only model files (.py) run without perf4sight; "
                              "make the bundle with `perf4sight profile bundle`".format(test.model))
        if not path.is_file():
            raise ConfigError("test config: model file not found: {}".format(path))
        if test_shape(test) is None:
            raise ConfigError(_no_shape(test))
        if path.with_suffix(".json").is_file():
            check_against_spec(path, load_model_file(test).module)


def check_against_spec(path: Path, module: nn.Module) -> None:
    """ConfigError when the model file `path` built `module`, a network other than the
    spec beside it (`<stem>.json`, there) describes."""
    spec_path = path.with_suffix(".json")
    problem = _spec_problem(module, spec_path)
    if problem is not None:
        raise ConfigError("{}: not the network its spec {} describes ({}): another network's file? "
                          "Write the model file and its spec again together".format(path, spec_path.name, problem))


def _spec_problem(module: nn.Module, spec_path: Path) -> Optional[str]:
    """How `module` differs from the spec at `spec_path` in a convolution's channels, groups
    or kernel, or a linear layer's inputs (what pruning changes; a classifier's outputs
    follow the classes a test runs at), layer by layer name; None when it does not."""
    try:
        layers = json.loads(spec_path.read_text(encoding="utf-8"))["layers"]
        named = dict(module.named_modules())
        for layer in layers:
            name, kind = layer["name"], layer["type"]
            if kind not in ("Conv2d", "Linear"):
                continue
            found = named.get(name)
            if found is None:
                return "it has no layer {}".format(name)
            if kind == "Conv2d":
                want = (layer["in"][0], layer["out"][0], layer["groups"], tuple(layer["kernel"]))
                got = tuple(getattr(found, a, None) for a in ("in_channels", "out_channels", "groups", "kernel_size"))
            else:
                want, got = (layer["in"][-1],), (getattr(found, "in_features", None),)
            if got != want:
                return "{} is {}, the spec says {}".format(name, got, want)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return "its layers cannot be read: {}: {}".format(type(exc).__name__, exc)
    return None


def import_loader(name: Optional[str]) -> Callable[[ProfileTest], Any]:
    """The loader named `module:function` (None: `load_model_file`)."""
    if name is None:
        return load_model_file
    module_name, _, function = name.partition(":")
    try:
        loader = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("model loader {!r} cannot be imported: {}".format(name, exc)) from None
    return loader

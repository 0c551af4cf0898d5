"""The packages whose names are imported on first use (`perf4sight.lazy`) still export every
name they list, as `from package import name` and as an attribute."""

from __future__ import annotations

import importlib

import pytest

LAZY_PACKAGES = ("perf4sight", "perf4sight.networks", "perf4sight.predict")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_listed_name_is_exported(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        exec(f"from {package} import {name}", {})  # the statement users write
        assert getattr(module, name) is not None
    assert dir(module) == sorted(module.__all__)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        getattr(importlib.import_module(package), "nope")

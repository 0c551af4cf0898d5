"""Regression methods follow scikit-learn's estimator contract and the METHODS registry's rules."""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from perf4sight.errors import ConfigError
from perf4sight.features import FEATURE_SETS
from perf4sight.fit import DEFAULT_METHOD, METHODS, PaperExtraTrees, resolve_method


@parametrize_with_checks([PaperExtraTrees(n_estimators=5)])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_names_a_feature_set_and_its_types(name):
    cls = METHODS[name]
    assert cls.feature_set in FEATURE_SETS
    assert all(isinstance(t, str) and "." in t for t in getattr(cls, "trusted_types", ()))


def test_default_method_resolves_and_unknown_is_refused():
    assert resolve_method("default") == DEFAULT_METHOD
    assert resolve_method("paper") == "paper"
    with pytest.raises(ConfigError, match="unknown method 'forest'"):
        resolve_method("forest")

"""The physical models' solvers on plain arrays: scikit-learn's estimator contract."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from perf4sight.fit.physical import LatencySolver, MemorySolver


@parametrize_with_checks([MemorySolver(), LatencySolver()])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)

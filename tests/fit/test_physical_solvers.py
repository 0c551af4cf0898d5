"""The physical models' solvers on plain arrays: scikit-learn's estimator contract."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from perf4sight.fit.physical import LatencySolver, MemorySolver


@parametrize_with_checks([MemorySolver(), LatencySolver()])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def test_an_exact_term_is_added_as_it_is_and_the_rest_fitted_around_it():
    """Milliseconds the device measured (an exact term) are taken off the targets before the
    fit, not scaled by it: the fixed cost and the rate of the rest come out as they were made."""
    rng = np.random.default_rng(0)
    work = rng.uniform(1, 10, 40)
    known = np.where(np.arange(40) % 4 == 0, rng.uniform(5, 50, 40), 0.0)  # held by a quarter of the rows
    latency = 2.0 + 3.0 * work + known
    X = np.column_stack([work, known])  # noqa: N806
    solver = LatencySolver(terms=("work", "known"), exact=("known",)).fit(X, latency)
    assert solver.intercept_ == pytest.approx(2.0) and solver.coef_.tolist() == pytest.approx([3.0, 1.0])
    np.testing.assert_allclose(solver.predict(X), latency)
    # without the rows that hold it, the term is still added as it is
    plain = LatencySolver(terms=("work", "known"), exact=("known",)).fit(X[known == 0], latency[known == 0])
    np.testing.assert_allclose(plain.predict(X), latency)
    with pytest.raises(ValueError, match="name unknown terms: other"):
        LatencySolver(terms=("work", "known"), exact=("other",)).fit(X, latency)

"""The collapsed bound's curvature against the posterior's (FlyMC's mixing in advance)."""

from types import SimpleNamespace

import numpy as np
import pytest

from pymc_minibatch_mh.bounds.looseness import collapsed_looseness


def _bound(hessian, **extra):
    return SimpleNamespace(collapsed=SimpleNamespace(hessian=np.asarray(hessian)), **extra)


def test_the_ratio_is_the_largest_generalised_eigenvalue_and_names_its_coordinate(rng):
    """A posterior covariance with correlations and a bound 40 times more curved along one
    direction, the prior's curvature elsewhere: the ratio is 40 and the coordinate the one
    that direction moves most in posterior sds."""
    d = 5
    a = rng.normal(size=(d, d))
    cov = a @ a.T + d * np.eye(d)
    chol = np.linalg.cholesky(cov)
    # Build the bound in whitened coordinates: eigenvalues 1.2 except 40 along e_3.
    basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
    basis[:, [0, 3]] = basis[:, [3, 0]]
    whitened = basis @ np.diag([40.0, 1.2, 1.2, 1.1, 1.0]) @ basis.T
    inverse = np.linalg.inv(chol)
    hessian = -(inverse.T @ whitened @ inverse)  # the log bound's Hessian is negative
    looseness = collapsed_looseness(_bound(hessian), chol)
    assert looseness.ratio == pytest.approx(40.0, rel=1e-9)
    moved = np.abs(chol @ basis[:, 0]) / np.sqrt(np.diag(cov))
    assert looseness.coordinate == int(np.argmax(moved))
    # Tempering divides the bound's curvature.
    assert collapsed_looseness(_bound(hessian), chol, 4.0).ratio == pytest.approx(10.0)
    # Negative control: a bound exactly as curved as the posterior has ratio 1.
    as_posterior = collapsed_looseness(_bound(-np.linalg.inv(cov)), chol)
    assert as_posterior.ratio == pytest.approx(1.0)


def test_nothing_to_measure_without_a_collapsed_quadratic_a_fit_or_for_an_exact_bound():
    chol = np.eye(2)
    assert collapsed_looseness(SimpleNamespace(), chol) is None
    assert collapsed_looseness(_bound(-np.eye(2)), None) is None
    assert collapsed_looseness(_bound(-np.eye(2), exact=True), chol) is None
    assert collapsed_looseness(_bound(-np.eye(2)), chol).ratio == pytest.approx(1.0)

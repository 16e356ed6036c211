"""The FlyMC bound of several observed variables over the same rows: a product of bounds.

With ``L_n = prod_k L_n^(k)`` (one factor per observed variable of row ``n``) and
``0 < B_n^(k) <= L_n^(k)`` for every factor, ``B_n = prod_k B_n^(k)`` satisfies
``0 < B_n <= L_n``, and ``log B_n`` is the sum of the parts' log-bounds, so the collapsed
sum over all rows is the sum of the parts' collapsed sums (O(K D^2)).

References
----------
.. [1] Maclaurin, D., Adams, R. P. "Firefly Monte Carlo: Exact MCMC with Subsets
   of Data", UAI 2014, Section 3.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_minibatch_mh.bounds.trust_region import TrustRegion


@dataclass(frozen=True, eq=False)
class SumBound:
    """``log B_n = sum_k log B_n^(k)`` over parts with the same rows (and region, if any).

    Parameters
    ----------
    parts : tuple
        Collapsible bounds (``n_data``, ``log_bound``, ``log_bound_sum`` and, for MALA,
        ``log_bound_sum_grad`` and ``log_bound_weighted_grad``), one per observed variable.
    region : TrustRegion or None
        Where every part holds (the parts on a trust region share it).
    """

    parts: tuple
    region: TrustRegion | None = None

    def __post_init__(self) -> None:
        sizes = {int(part.n_data) for part in self.parts}
        if len(self.parts) < 2 or len(sizes) != 1:
            raise ValueError(f"SumBound needs two or more parts over the same rows; got {sizes}.")

    @property
    def n_data(self) -> int:
        return int(self.parts[0].n_data)

    @property
    def family(self) -> str:
        return "+".join(getattr(part, "family", "custom") for part in self.parts)

    def log_bound(self, q: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        return sum(part.log_bound(q, idx) for part in self.parts)

    def log_bound_sum(self, q: np.ndarray) -> float:
        return float(sum(part.log_bound_sum(q) for part in self.parts))

    def log_bound_sum_grad(self, q: np.ndarray) -> np.ndarray:
        return sum(part.log_bound_sum_grad(q) for part in self.parts)

    def log_bound_sum_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = 0.0, 0.0
        for part in self.parts:
            both = getattr(part, "log_bound_sum_and_grad", None)
            part_value, part_grad = (
                both(q) if both is not None else (part.log_bound_sum(q), part.log_bound_sum_grad(q))
            )
            value, grad = value + float(part_value), grad + part_grad
        return value, grad

    def log_bound_weighted_grad(
        self, q: np.ndarray, idx: np.ndarray, weights: np.ndarray
    ) -> np.ndarray:
        return sum(part.log_bound_weighted_grad(q, idx, weights) for part in self.parts)

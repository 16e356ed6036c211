"""Third derivatives of a function of two channels by central finite differences."""

import numpy as np


def channel_third_derivatives(f, eta: float, t: float, h: float = 1e-3) -> np.ndarray:
    """``(f_eee, f_eet, f_ett, f_ttt)`` of ``f(eta, t)`` at a point (step ``h``)."""

    def d3(g):
        return (g(2 * h) - 2 * g(h) + 2 * g(-h) - g(-2 * h)) / (2 * h**3)

    def d2_eta(tt):
        return (f(eta + h, tt) - 2 * f(eta, tt) + f(eta - h, tt)) / h**2

    def d2_t(ee):
        return (f(ee, t + h) - 2 * f(ee, t) + f(ee, t - h)) / h**2

    return np.array(
        [
            d3(lambda e: f(eta + e, t)),
            (d2_eta(t + h) - d2_eta(t - h)) / (2 * h),
            (d2_t(eta + h) - d2_t(eta - h)) / (2 * h),
            d3(lambda e: f(eta, t + e)),
        ]
    )

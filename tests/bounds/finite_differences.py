"""Derivatives by central finite differences, for the bound checks in this directory."""

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


def channel_low_derivatives(f, eta: float, t: float, h: float = 1e-4) -> np.ndarray:
    """``(f_e, f_t, f_ee, f_et, f_tt)`` of ``f(eta, t)`` at a point (step ``h``)."""
    f0 = f(eta, t)
    return np.array(
        [
            (f(eta + h, t) - f(eta - h, t)) / (2 * h),
            (f(eta, t + h) - f(eta, t - h)) / (2 * h),
            (f(eta + h, t) - 2 * f0 + f(eta - h, t)) / h**2,
            (f(eta + h, t + h) - f(eta + h, t - h) - f(eta - h, t + h) + f(eta - h, t - h))
            / (4 * h * h),
            (f(eta, t + h) - 2 * f0 + f(eta, t - h)) / h**2,
        ]
    )


def numeric_hessian(fn, q, h=1e-4):
    """Hessian of ``fn`` at ``q`` (step ``h``)."""
    eye = np.eye(q.size)
    return np.array(
        [
            [
                (
                    fn(q + h * (eye[i] + eye[j]))
                    - fn(q + h * (eye[i] - eye[j]))
                    - fn(q - h * (eye[i] - eye[j]))
                    + fn(q - h * (eye[i] + eye[j]))
                )
                / (4 * h * h)
                for j in range(q.size)
            ]
            for i in range(q.size)
        ]
    )

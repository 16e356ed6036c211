"""Points spread over a trust region, for the bound checks in this directory."""

import numpy as np


def points_in_region(rng, region, fractions, n_points):
    """Points at whitened distances ``fraction * radius`` from the centre, random directions."""
    for fraction in fractions:
        for _ in range(n_points):
            z = rng.standard_normal(region.centre.size)
            yield region.centre + region.chol @ (fraction * region.radius * z / np.linalg.norm(z))

"""Recognising ``Categorical(logit_p=X @ W + b)``: the logits as features times a map of q."""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Variable

from pymc_minibatch_mh.likelihood.affine_maps import (
    _close,
    _columns,
    _Context,
    _decompose,
    _refuse_outside_block,
    _verify_affine,
)
from pymc_minibatch_mh.likelihood.glm_families import (
    _BOUNDS_HINT,
    _SUPPORTED,
)
from pymc_minibatch_mh.likelihood.glm_likelihoods import (
    LinearPredictorLikelihood,
    UnsupportedLikelihood,
)


def _recognise_categorical(
    ctx: _Context, logits_rv: Variable, observed: np.ndarray
) -> LinearPredictorLikelihood:
    n_data, name = ctx.n_data, ctx.rv.name
    what = f"The logits of {name!r}"
    (logits,) = ctx.model.replace_rvs_by_values([logits_rv])
    _refuse_outside_block(ctx, logits, f"the logits of {name!r}")
    if logits.ndim not in (1, 2):
        raise UnsupportedLikelihood(
            f"The logits of {name!r} have {logits.ndim} dimensions; expected (N, K) or (K,)."
        )
    n_classes = int(np.shape(ctx.compile([logits])(ctx.q0)[0])[-1])
    if n_classes < 2:
        raise UnsupportedLikelihood(f"Categorical {name!r} has fewer than 2 classes.")
    if not np.all((observed >= 0) & (observed < n_classes)):
        raise UnsupportedLikelihood(
            f"Categorical observations of {name!r} must lie in 0..{n_classes - 1}."
        )
    how = (
        " Write the logits as `X @ W + b` with X an (N, P) data matrix and W (P, K), b (K,) "
        "affine in the sampled variables. " + _SUPPORTED + " " + _BOUNDS_HINT
    )
    # What depends on q outside the products must be an intercept: the same on every row.
    parts = _decompose(
        ctx,
        logits,
        (n_classes,),
        what,
        per_row=False,
        not_row_constant=(
            f"{what} have a term that depends on the sampled variables differently on each "
            "row but is not a product X @ W of a data matrix X (N, P) and a coefficient "
            "matrix W (P, K)." + how
        ),
    )
    blocks, maps, offsets = [], [], []
    for product in parts.products:
        weight = product.weight  # (N, K): d logits / d (X @ W), elementwise
        features, coef_map, coef_offset = product.features, product.coef_map, product.coef_offset
        if _close(weight, np.full_like(weight, weight.flat[0])):
            coef_map, coef_offset = weight.flat[0] * coef_map, weight.flat[0] * coef_offset
        elif _close(weight, np.broadcast_to(weight[:, :1], weight.shape)):
            features = weight[:, :1] * features  # a per-row scale
        elif _close(weight, np.broadcast_to(weight[:1], weight.shape)):
            n_features = features.shape[1]  # a per-class scale of the columns of W
            scale = np.tile(weight[0], n_features)
            coef_map, coef_offset = scale[:, None] * coef_map, scale * coef_offset
        else:
            raise UnsupportedLikelihood(
                f"{what} scale a product X @ W differently for each class and row." + how
            )
        blocks.append(features)
        maps.append(coef_map)
        offsets.append(coef_offset)
    intercept = parts.residual_jac  # (K, D)
    if np.any(intercept != 0) or not blocks:
        blocks.append(np.ones((n_data, 1)))
        maps.append(intercept)
        offsets.append(np.zeros(n_classes))
    design = np.hstack(blocks) if len(blocks) > 1 else blocks[0]
    coef_map = np.vstack(maps)
    coef_offset = np.concatenate(offsets)
    coef0 = (coef_map @ ctx.q0 + coef_offset).reshape(design.shape[1], n_classes)
    result = LinearPredictorLikelihood(
        family="categorical_logit",
        design=design,
        offset=parts.value_q0 - design @ coef0,
        observed=observed.astype(np.int64),
        params={},
        coef_map=coef_map,
        coef_offset=coef_offset,
        n_classes=n_classes,
    )
    _verify_affine(ctx, parts.full, result.linear_predictor, _columns(ctx, logits), what)
    return result

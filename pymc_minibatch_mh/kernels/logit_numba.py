"""The numba-compiled loops of FlyMC over logit GLM rows (one file: numba's disk cache
tracks a compiled function by its file, so every loop that calls :func:`logit_row` lives
here and is recompiled with it).

Imported only where a compiled path is taken (:mod:`~pymc_minibatch_mh.kernels.split_kicks`,
:mod:`~pymc_minibatch_mh.kernels.compiled_split_iteration`). The arithmetic is that of the
numpy paths, so a chain is the same up to rounding:

* linear predictor ``eta_n = X_n q + o_n``; with the rows held as a product (the compiled
  iteration) ``X_n q = weight (F_n . (W q)) + c . q`` for features ``F``, coefficient map
  ``W`` and constant row ``c``;
* log-likelihood ``log L_n``: Bernoulli ``-log(1 + exp(-s))`` with ``s = eta`` for ``y = 1``
  and ``-eta`` for ``y = 0``; binomial ``log C(n, y) + y eta - n log(1 + exp(eta))``;
* quadratic bound ``log B_n = a_n + e (b_n + c_n e)`` with ``e = eta_n - anchor_n``;
* tempered gap ``g_n = (log L_n - log B_n) / K``, ``log Ltilde_n = g_n + log(1 - e^-g_n)``
  and the weight of a row's gradient ``1 / (K (1 - e^-g_n))``.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_minibatch_mh.cache_location import cached_njit

# Reassociation lets the row sums vectorise; no flag that assumes finite values (the loops
# test for infinities and NaN). The disk cache is numba's, in the package's cache directory
# (see :mod:`~pymc_minibatch_mh.cache_location`), not in ``__pycache__`` beside this file.
_jit = cached_njit(nogil=True, fastmath={"reassoc", "contract"})

#: Statuses returned by the loops.
AT_END, REJECT, BOUND_VIOLATED = 0, 1, 2


@_jit
def bernoulli_loglik(eta, y):
    """``log sigmoid(s)`` with ``s = eta`` for ``y = 1`` and ``-eta`` for ``y = 0``."""
    s = -eta if y > 0.5 else eta
    if s > 0.0:
        return -(s + math.log1p(math.exp(-s)))
    if s < 0.0:
        return -math.log1p(math.exp(s))
    return -math.log(2.0)


@_jit
def logit_row(family, eta, y, n, log_choose, anchor, value, slope, curvature):
    """``(log L, d log L / d eta, log B, d log B / d eta)`` of one row at ``eta``."""
    if family == 0:
        loglik = bernoulli_loglik(eta, y)
        lik_slope = y - 1.0 / (1.0 + math.exp(-eta))
    else:
        if eta > 0.0:
            softplus = eta + math.log1p(math.exp(-eta))
        elif eta < 0.0:
            softplus = math.log1p(math.exp(eta))
        else:
            softplus = math.log(2.0)
        loglik = log_choose + y * eta - n * softplus
        lik_slope = y - n / (1.0 + math.exp(-eta))
    e = eta - anchor
    logbound = value + e * (slope + curvature * e)
    return loglik, lik_slope, logbound, slope + 2.0 * curvature * e


@_jit
def violates(loglik, logbound, check, tolerance):
    """Whether the gap proves the bound above the likelihood (beyond rounding)."""
    gap = loglik - logbound
    return check and gap < -tolerance * (1.0 + abs(loglik)) and math.isfinite(loglik)


@_jit
def rotate(x, momentum, kick, half, cos, sin):
    """Half kick, then the Gaussian's rotation of ``(x, momentum)``, in place."""
    for i in range(x.size):
        momentum[i] += half * kick[i]
        xi = x[i]
        x[i] = cos * xi + sin * momentum[i]
        momentum[i] = cos * momentum[i] - sin * xi


@_jit
def position(x, mean, inverse, q):
    """``q = m + C^-T x`` in place, with ``C^-1`` lower triangular (row ``j`` of ``C^-1``
    reaches ``q[: j + 1]``)."""
    dim = x.size
    for i in range(dim):
        q[i] = mean[i]
    for j in range(dim):
        xj = x[j]
        for i in range(j + 1):
            q[i] += inverse[j, i] * xj


@_jit
def whiten(inverse, grad, kick):
    """``kick = C^-1 grad`` in place (lower triangle only); False if not finite."""
    finite = True
    for i in range(grad.size):
        total = 0.0
        for j in range(i + 1):
            total += inverse[i, j] * grad[j]
        kick[i] = total
        if not math.isfinite(total):
            finite = False
    return finite


@_jit
def split_kicks(
    family,
    design,
    offset,
    observed,
    trials,
    log_choose,
    anchor,
    value,
    slope,
    curvature,
    x,
    momentum,
    kick,
    mean,
    inverse,
    step_size,
    n_steps,
    temperature,
    check,
    tolerance,
    q,
):  # pragma: no cover - compiled; its numpy twin is split_hmc_theta_update's loop
    """The steps of a split trajectory over gathered rows (``design``, one row each) up to
    its end point: ``(status, steps)``; see :func:`~pymc_minibatch_mh.kernels.split_kicks.
    run_split_kicks`."""
    n_rows, dim = design.shape
    cos, sin = math.cos(step_size), math.sin(step_size)
    half = 0.5 * step_size
    weighted = np.empty(n_rows)
    grad = np.empty(dim)
    for step in range(n_steps):
        rotate(x, momentum, kick, half, cos, sin)
        position(x, mean, inverse, q)
        if step == n_steps - 1:
            return AT_END, step + 1
        violated = False
        empty = False
        for r in range(n_rows):
            eta = offset[r]
            for j in range(dim):
                eta += design[r, j] * q[j]
            loglik, lik_slope, logbound, bound_slope = logit_row(
                family, eta, observed[r], trials[r], log_choose[r], anchor[r], value[r],
                slope[r], curvature[r],
            )  # fmt: skip
            if violates(loglik, logbound, check, tolerance):
                violated = True
            gap = (loglik - logbound) / temperature
            if not gap > 0.0:
                empty = True
                weighted[r] = 0.0
                continue
            weighted[r] = (lik_slope - bound_slope) / (temperature * -math.expm1(-gap))
        if violated:
            return BOUND_VIOLATED, step + 1
        if empty:
            return REJECT, step + 1
        for j in range(dim):
            grad[j] = 0.0
        for r in range(n_rows):
            w = weighted[r]
            for j in range(dim):
                grad[j] += design[r, j] * w
        if not whiten(inverse, grad, kick):
            return REJECT, step + 1
        for i in range(dim):
            momentum[i] += half * kick[i]
    return AT_END, n_steps


# ------------------------------------------------------------------ reading random rows
@_jit
def touch_rows(rows, matrix, vectors):
    """Read every cache line of ``matrix[r]`` and each ``vector[r]`` for ``r`` in ``rows``,
    and return the sum of what was read (returned so that the compiler keeps the reads).

    Rows drawn at random from N = 10^6 are not in any cache: a loop that computes with
    each row as it reads it waits for them one by one (measured: 100 random rows of a
    10-feature design cost 38 µs in :func:`bernoulli_residuals` against 10 µs for rows in
    cache). These reads depend on nothing but ``rows``, so the processor issues many of
    them at once; the loop that follows then finds its rows in cache.
    """
    total = 0.0
    n_cols = matrix.shape[1]
    step = max(1, 64 // matrix.itemsize)
    for i in range(rows.size):
        r = rows[i]
        for k in range(0, n_cols, step):
            total += matrix[r, k]
        total += matrix[r, n_cols - 1]
        for vector in vectors:
            total += vector[r]
    return total


# ------------------------------------------------------------------ rows held as a product
@_jit
def coefficients(coef_map, constant_row, q, w):
    """``w = W q`` in place, and ``c . q``."""
    n_feat, dim = coef_map.shape
    for k in range(n_feat):
        total = 0.0
        for j in range(dim):
            total += coef_map[k, j] * q[j]
        w[k] = total
    const = 0.0
    for j in range(dim):
        const += constant_row[j] * q[j]
    return const


@_jit
def row_eta(features, weight, offset, row, w, const):
    """``eta`` of data row ``row``: ``weight (F_row . w) + const + o_row``."""
    total = 0.0
    for k in range(w.size):
        total += features[row, k] * w[k]
    return weight * total + const + offset[row]


@_jit
def glm_row(
    r, family, features, weight, offset, observed, trials, log_choose, anchor, value, slope,
    curvature, w, const,
):  # fmt: skip
    """:func:`logit_row` of data row ``r`` at the point whose :func:`coefficients` are
    ``(w, const)``."""
    eta = row_eta(features, weight, offset, r, w, const)
    return logit_row(
        family, eta, observed[r], trials[r], log_choose[r], anchor[r], value[r], slope[r],
        curvature[r],
    )  # fmt: skip


@_jit
def tempered_log_tilde(gap, temperature):
    """``log Ltilde`` of an untempered gap; ``-inf`` where the tempered gap is ``<= 0``."""
    gap = gap / temperature
    if not gap > 0.0:
        return -math.inf
    return gap + math.log(-math.expm1(-gap))


@_jit
def bright_terms(
    rows, family, features, coef_map, weight, constant_row, offset, observed, trials,
    log_choose, anchor, value, slope, curvature, q, temperature, check, tolerance,
    w, grad_w, log_lt,
):  # fmt: skip  # pragma: no cover - compiled
    """``log Ltilde`` of ``rows`` at ``q`` into ``log_lt`` and the gradient of their sum
    into ``grad_w`` (in the features' coordinates; see :func:`feature_grad`). Returns
    ``(status, constant part of the gradient, the violating row or -1)``."""
    const = coefficients(coef_map, constant_row, q, w)
    for k in range(grad_w.size):
        grad_w[k] = 0.0
    grad_const = 0.0
    status = AT_END
    for i in range(rows.size):
        r = rows[i]
        loglik, lik_slope, logbound, bound_slope = glm_row(
            r, family, features, weight, offset, observed, trials, log_choose, anchor, value,
            slope, curvature, w, const,
        )  # fmt: skip
        if violates(loglik, logbound, check, tolerance):
            return BOUND_VIOLATED, 0.0, r
        log_lt[i] = tempered_log_tilde(loglik - logbound, temperature)
        if log_lt[i] == -math.inf:
            status = REJECT
            continue
        gap = (loglik - logbound) / temperature
        v = (lik_slope - bound_slope) / (temperature * -math.expm1(-gap))
        for k in range(grad_w.size):
            grad_w[k] += weight * features[r, k] * v
        grad_const += v
    return status, grad_const, -1


@_jit
def feature_grad(coef_map, constant_row, grad_w, grad_const, grad):
    """``grad = W^T grad_w + c grad_const`` in place."""
    n_feat, dim = coef_map.shape
    for j in range(dim):
        grad[j] = constant_row[j] * grad_const
    for k in range(n_feat):
        g = grad_w[k]
        for j in range(dim):
            grad[j] += coef_map[k, j] * g


@_jit
def split_trajectory(
    bright, family, features, coef_map, weight, constant_row, offset, observed, trials,
    log_choose, anchor, value, slope, curvature, log_lt, q0, mean, precision_chol, inverse,
    step_size, n_steps, momentum, temperature, check, tolerance, q, log_lt_end,
):  # fmt: skip  # pragma: no cover - compiled; its numpy twin is split_hmc_theta_update
    """A split-HMC trajectory of ``q | z`` from ``q0`` over the bright rows ``bright``
    (data rows): ``n_steps`` steps of ``step_size`` from the drawn ``momentum`` (updated in
    place).

    Returns ``(status, steps, row, kinetic change, sum of log Ltilde at the start, at the
    end)``; at :data:`AT_END` ``q`` holds the end point and ``log_lt_end`` its bright rows'
    ``log Ltilde``; at :data:`BOUND_VIOLATED`, ``row`` is the data row whose bound is above
    its likelihood.
    """
    dim = q0.size
    n_feat = coef_map.shape[0]
    cos, sin = math.cos(step_size), math.sin(step_size)
    half = 0.5 * step_size
    kinetic0 = 0.0
    for i in range(dim):
        kinetic0 += momentum[i] * momentum[i]
    kinetic0 *= 0.5
    lt_sum0 = 0.0
    for i in range(bright.size):
        lt_sum0 += log_lt[bright[i]]
    # whitened start x = C^T (q0 - m)
    x = np.empty(dim)
    for i in range(dim):
        total = 0.0
        for j in range(dim):
            total += precision_chol[j, i] * (q0[j] - mean[j])
        x[i] = total
    w = np.empty(n_feat)
    grad_w = np.empty(n_feat)
    grad = np.empty(dim)
    kick = np.empty(dim)
    # the kick at the start, weighted by the cached log Ltilde
    const = coefficients(coef_map, constant_row, q0, w)
    for k in range(n_feat):
        grad_w[k] = 0.0
    grad_const = 0.0
    for i in range(bright.size):
        r = bright[i]
        _, lik_slope, _, bound_slope = glm_row(
            r, family, features, weight, offset, observed, trials, log_choose, anchor, value,
            slope, curvature, w, const,
        )  # fmt: skip
        v = (1.0 + math.exp(-log_lt[r])) / temperature * (lik_slope - bound_slope)
        for k in range(n_feat):
            grad_w[k] += weight * features[r, k] * v
        grad_const += v
    feature_grad(coef_map, constant_row, grad_w, grad_const, grad)
    whiten(inverse, grad, kick)
    for step in range(n_steps):
        rotate(x, momentum, kick, half, cos, sin)
        position(x, mean, inverse, q)
        status, grad_const, row = bright_terms(
            bright, family, features, coef_map, weight, constant_row, offset, observed, trials,
            log_choose, anchor, value, slope, curvature, q, temperature, check, tolerance,
            w, grad_w, log_lt_end,
        )  # fmt: skip
        if status != AT_END:
            return status, step + 1, row, 0.0, lt_sum0, 0.0
        feature_grad(coef_map, constant_row, grad_w, grad_const, grad)
        if not whiten(inverse, grad, kick):
            return REJECT, step + 1, -1, 0.0, lt_sum0, 0.0
        for i in range(dim):
            momentum[i] += half * kick[i]
    kinetic1 = 0.0
    lt_sum1 = 0.0
    for i in range(dim):
        kinetic1 += momentum[i] * momentum[i]
    for i in range(bright.size):
        lt_sum1 += log_lt_end[i]
    return AT_END, n_steps, -1, 0.5 * kinetic1 - kinetic0, lt_sum0, lt_sum1


@_jit
def swap_into_block(arr, tab, idx, lo, hi):
    """Move the ``hi - lo`` store entries ``idx`` to positions ``[lo, hi)`` by swaps, as
    :meth:`~pymc_minibatch_mh.kernels.firefly.BrightnessStore._swap_into_block` does
    (members inside stay; each one outside swaps, in order, with the free positions in
    increasing order)."""
    taken = np.zeros(hi - lo, dtype=np.bool_)
    for i in range(idx.size):
        p = tab[idx[i]]
        if lo <= p < hi:
            taken[p - lo] = True
    free = lo
    for i in range(idx.size):
        mover = idx[i]
        p = tab[mover]
        if lo <= p < hi:
            continue
        while taken[free - lo]:
            free += 1
        taken[free - lo] = True
        displaced = arr[free]
        arr[free] = mover
        arr[p] = displaced
        tab[mover] = free
        tab[displaced] = p


@_jit
def brightness_update(
    arr, tab, n_bright, log_lt, q_db, u_dark, offsets, u_candidates, family, features,
    coef_map, weight, constant_row, offset, observed, trials, log_choose, anchor, value,
    slope, curvature, q, temperature, check, tolerance,
):  # fmt: skip  # pragma: no cover - compiled; its numpy twin is firefly.brightness_update
    """The implicit MH update of every ``z_n`` given ``q``, in place on the store (``arr``,
    ``tab``) and ``log_lt``, with the numpy path's draws: ``u_dark`` one uniform per bright
    row, ``offsets`` the positions in the dark block proposed to brighten, ``u_candidates``
    one uniform per proposal. Returns ``(new number of bright rows, violating row or
    -1, the sum read by :func:`touch_rows`)``."""
    log_q = math.log(q_db)
    darken = np.empty(n_bright, dtype=np.int64)
    n_darken = 0
    for i in range(n_bright):
        r = arr[i]
        if math.log1p(-u_dark[i]) <= log_q - log_lt[r]:
            darken[n_darken] = r
            n_darken += 1
    candidates = np.empty(offsets.size, dtype=np.int64)
    for i in range(offsets.size):
        candidates[i] = arr[n_bright + offsets[i]]
    row_columns = (offset, observed, trials, log_choose, anchor, value, slope, curvature)
    touched = touch_rows(candidates, features, row_columns)
    w = np.empty(coef_map.shape[0])
    const = coefficients(coef_map, constant_row, q, w)
    values = np.empty(candidates.size)
    for i in range(candidates.size):
        r = candidates[i]
        loglik, _, logbound, _ = glm_row(
            r, family, features, weight, offset, observed, trials, log_choose, anchor, value,
            slope, curvature, w, const,
        )  # fmt: skip
        if violates(loglik, logbound, check, tolerance):
            return n_bright, r, touched
        values[i] = tempered_log_tilde(loglik - logbound, temperature)
    brighten = np.empty(candidates.size, dtype=np.int64)
    n_brighten = 0
    for i in range(candidates.size):
        if math.log1p(-u_candidates[i]) <= values[i] - log_q:
            r = candidates[i]
            brighten[n_brighten] = r
            n_brighten += 1
            log_lt[r] = values[i]
    if n_darken:
        swap_into_block(arr, tab, darken[:n_darken], n_bright - n_darken, n_bright)
        n_bright -= n_darken
    if n_brighten:
        swap_into_block(arr, tab, brighten[:n_brighten], n_bright, n_bright + n_brighten)
        n_bright += n_brighten
    return n_bright, -1, touched


@_jit
def draw_brightness(
    uniforms, family, features, coef_map, weight, constant_row, offset, observed, trials,
    log_choose, anchor, value, slope, curvature, q, temperature, check, tolerance, log_lt,
    arr, tab,
):  # fmt: skip  # pragma: no cover - compiled; its numpy twin is firefly.draw_brightness
    """Every ``z_n`` drawn from ``p(z_n | q)`` in one pass with the numpy path's draws
    (``uniforms``, one per row): ``log_lt`` filled, the store laid out (``arr`` the bright
    rows first, in order, then the dark ones; ``tab`` its inverse). Returns ``(number
    bright, row)``: ``row`` is -1, or, with ``n_bright`` -2, the first row whose
    log-likelihood is not finite, or else, with ``n_bright`` -1, the first row whose bound
    is above its likelihood (the numpy path's order of checks)."""
    n_data = offset.size
    w = np.empty(coef_map.shape[0])
    const = coefficients(coef_map, constant_row, q, w)
    violated = -1
    for r in range(n_data):
        loglik, _, logbound, _ = glm_row(
            r, family, features, weight, offset, observed, trials, log_choose, anchor, value,
            slope, curvature, w, const,
        )  # fmt: skip
        if not math.isfinite(loglik):
            return -2, r
        if violated < 0 and violates(loglik, logbound, check, tolerance):
            violated = r
        log_lt[r] = tempered_log_tilde(loglik - logbound, temperature)
    if violated >= 0:
        return -1, violated
    # p(bright) = sigmoid(log Ltilde): bright iff log(1 - u) <= -logaddexp(0, -log Ltilde)
    n_bright = 0
    for r in range(n_data):
        u = uniforms[r]
        a = -log_lt[r]
        if a == 0.0:
            threshold = -math.log(2.0)
        elif a > 0.0:
            threshold = -(a + math.log1p(math.exp(-a)))
        else:
            threshold = -math.log1p(math.exp(a))
        if math.log1p(-u) <= threshold:
            tab[r] = 1
            n_bright += 1
        else:
            tab[r] = 0
    bright, dark = 0, n_bright
    for r in range(n_data):
        if tab[r] == 1:
            arr[bright] = r
            bright += 1
        else:
            arr[dark] = r
            dark += 1
    for i in range(n_data):
        tab[arr[i]] = i
    return n_bright, -1


@_jit
def bernoulli_residuals(
    idx, features, coef_map, weight, constant_row, offset, observed, q_new, q_old, q_ref, out
):  # fmt: skip  # pragma: no cover - compiled; its numpy twin is NumpyGLM.residual_diff
    """Per row ``idx[i]`` of a Bernoulli-logit GLM, ``l(q_new) - l(q_old)`` minus the same
    difference of the row's second-order Taylor expansion in ``eta`` about ``q_ref``, into
    ``out``."""
    n_feat = coef_map.shape[0]
    w_new, w_old, w_ref = np.empty(n_feat), np.empty(n_feat), np.empty(n_feat)
    c_new = coefficients(coef_map, constant_row, q_new, w_new)
    c_old = coefficients(coef_map, constant_row, q_old, w_old)
    c_ref = coefficients(coef_map, constant_row, q_ref, w_ref)
    touched = touch_rows(idx, features, (offset, observed))
    for i in range(idx.size):
        r = idx[i]
        e_new = row_eta(features, weight, offset, r, w_new, c_new)
        e_old = row_eta(features, weight, offset, r, w_old, c_old)
        e_ref = row_eta(features, weight, offset, r, w_ref, c_ref)
        y = observed[r]
        p = 1.0 / (1.0 + math.exp(-e_ref))
        de, se = e_new - e_old, e_new + e_old - 2.0 * e_ref
        proxy = (y - p) * de - 0.5 * p * (1.0 - p) * de * se
        out[i] = bernoulli_loglik(e_new, y) - bernoulli_loglik(e_old, y) - proxy
    return touched


@_jit
def bernoulli_taylor_sums(
    idx, features, coef_map, weight, constant_row, offset, observed, q, g_feat, h_feat, h_gram
):  # fmt: skip  # pragma: no cover - compiled; its numpy twin is NumpyGLM.chunk_derivatives
    """The rows ``idx`` of a Bernoulli-logit GLM: their log-likelihood's sum at ``q`` and
    its derivatives in ``eta`` summed in the features' coordinates. Returns ``(sum of
    l_n, sum of d_n, sum of h_n)`` and adds ``sum d_n F_n`` to ``g_feat``, ``sum h_n F_n``
    to ``h_feat`` and ``sum h_n F_n F_n'`` to ``h_gram``, where ``d_n = y_n - p_n`` and
    ``h_n = -p_n (1 - p_n)`` are the first and second derivatives in ``eta_n``
    (:meth:`~pymc_minibatch_mh.kernels.compiled_residuals.BernoulliRows.taylor_sums` maps
    them to ``q``). One exponential per row: with ``e = exp(-|eta|)``, ``p = 1 / (1 + e)``
    or ``e / (1 + e)`` and ``l_n = -(max(-s, 0) + log1p(e))``, ``s = +-eta`` as in
    :func:`bernoulli_loglik`."""
    n_feat = coef_map.shape[0]
    w = np.empty(n_feat)
    const = coefficients(coef_map, constant_row, q, w)
    total, d_sum, h_sum = 0.0, 0.0, 0.0
    for i in range(idx.size):
        r = idx[i]
        eta = row_eta(features, weight, offset, r, w, const)
        y = observed[r]
        e = math.exp(-abs(eta))
        p = 1.0 / (1.0 + e) if eta >= 0.0 else e / (1.0 + e)
        s = eta if y > 0.5 else -eta
        total -= max(-s, 0.0) + math.log1p(e)
        d, h = y - p, -p * (1.0 - p)
        d_sum += d
        h_sum += h
        for j in range(n_feat):
            hf_j = h * features[r, j]
            g_feat[j] += d * features[r, j]
            h_feat[j] += hf_j
            for k in range(n_feat):
                h_gram[j, k] += hf_j * features[r, k]
    return total, d_sum, h_sum

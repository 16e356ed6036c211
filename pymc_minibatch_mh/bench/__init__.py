"""Benchmarks reproducing the shapes of the papers' experiments on synthetic data.

Run ``python -m pymc_minibatch_mh.bench {gmm,logistic,robust,tall-logistic,all}
[--quick]``; results go to ``benchmarks/results/`` as markdown, JSON and PNG files.
Every run compares the minibatch steps with NUTS (and full-data Metropolis) in one
process with :func:`pymc_minibatch_mh.compare`, so speed ratios come from the same
machine and run. ``peers``, ``many`` and ``crossover`` instead run each method in a fresh
process (:mod:`~pymc_minibatch_mh.bench.peers`, :mod:`~pymc_minibatch_mh.bench.many`,
:mod:`~pymc_minibatch_mh.bench.crossover`: the N from which each step beats PyMC's
NUTS), and ``tall-disk`` reads data from memory-mapped files.
"""

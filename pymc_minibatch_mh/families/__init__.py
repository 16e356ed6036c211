"""The likelihood families the package recognises, and what each step can do with them.

This layer imports neither PyMC nor PyTensor, so kernels, bounds and the recogniser all
read the same records (:mod:`.registry`). A family added since the registry is one module
here with its numerics (:mod:`.bernoulli_probit`, :mod:`.bernoulli_cloglog`: density,
derivatives, certified constants, FlyMC's bound) plus its record; the rest of the package
reaches it through four one-line hooks that still name it: the recogniser's graph match
(:mod:`pymc_minibatch_mh.likelihood.glm_families`), the numpy density
(:func:`pymc_minibatch_mh.likelihood.glm_likelihoods.family_loglik`), TunaMH's constants
(:mod:`pymc_minibatch_mh.bounds.taylor_remainder`) and FlyMC's bound dispatch. The older
families' numerics still live in their bound modules.
"""

from pymc_minibatch_mh.families.registry import (
    FAMILY_RECORDS,
    Family,
    family_described,
    family_label,
    family_record,
    names_where,
    support_sentence,
)

__all__ = [
    "FAMILY_RECORDS",
    "Family",
    "family_described",
    "family_label",
    "family_record",
    "names_where",
    "support_sentence",
]

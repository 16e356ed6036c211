"""The likelihood families the package recognises, and what each step can do with them.

This layer imports neither PyMC nor PyTensor, so kernels, bounds and the recogniser all
read the same records (:mod:`.registry`). A family whose record has ``numerics=True`` is
one module here (:mod:`.bernoulli_probit`, :mod:`.bernoulli_cloglog`, :mod:`.poisson_log`,
:mod:`.gamma_log`: density, derivatives, certified constants, FlyMC's bound) with the
interface of :func:`.registry.family_numerics`; the numpy density, TunaMH's constants and
FlyMC's bound reach it through that function. Adding such a family is its module, its
record and the recogniser's graph match (:mod:`pymc_minibatch_mh.likelihood.glm_families`).
The older families' numerics still live in their bound modules.
"""

from pymc_minibatch_mh.families.registry import (
    FAMILY_RECORDS,
    Family,
    family_described,
    family_label,
    family_numerics,
    family_record,
    names_where,
    support_sentence,
)

__all__ = [
    "FAMILY_RECORDS",
    "Family",
    "family_described",
    "family_label",
    "family_numerics",
    "family_record",
    "names_where",
    "support_sentence",
]

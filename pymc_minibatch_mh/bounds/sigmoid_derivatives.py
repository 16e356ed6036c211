"""Suprema of the logistic sigmoid's derivatives, shared by the bounds of the families
built on it (Bernoulli and Binomial logits, Beta means, zero-inflated and hurdle odds).

With ``s = sigmoid(x)``: ``s' = s (1 - s)``, ``s'' = s (1 - s)(1 - 2 s)`` and
``s''' = s (1 - s)(1 - 6 s + 6 s^2)``; over all ``x`` their absolute values are at most
1/4 (at ``s = 1/2``), sqrt(3)/18 (at ``s = 1/2 -+ sqrt(3)/6``) and 1/8 (at ``s = 1/2``).
"""

import math

#: sup |sigmoid'|, sup |sigmoid''| and sup |sigmoid'''|.
SIGMOID_D1 = 0.25
SIGMOID_D2 = math.sqrt(3.0) / 18.0
SIGMOID_D3 = 0.125

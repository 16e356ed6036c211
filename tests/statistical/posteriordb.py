"""Loading reference posteriors from ``../shared/posteriordb`` (see its README)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

POSTERIORDB = Path(__file__).resolve().parents[3] / "shared" / "posteriordb"


def _posteriordb(name: str, posterior: str):
    """``(data dict, {"param[i]": draws})`` of one dataset and its reference posterior."""
    if not POSTERIORDB.is_dir():
        pytest.fail(f"posteriordb data not found at {POSTERIORDB} (../shared must sit beside)")
    with zipfile.ZipFile(POSTERIORDB / f"{name}.json.zip") as zf:
        data = json.loads(zf.read(zf.namelist()[0]))
    with zipfile.ZipFile(POSTERIORDB / f"{posterior}.draws.json.zip") as zf:
        chains = json.loads(zf.read(zf.namelist()[0]))
    draws = {k: np.concatenate([np.asarray(c[k]) for c in chains]) for k in chains[0]}
    return data, draws


def _stan_to_pymc_names(draws: dict) -> dict:
    """``beta[1]`` (Stan, 1-based) -> ``beta[0]``; scalars unchanged."""
    out = {}
    for key, values in draws.items():
        if "[" in key:
            name, index = key[:-1].split("[")
            key = f"{name}[{int(index) - 1}]"
        out[key] = values
    return out

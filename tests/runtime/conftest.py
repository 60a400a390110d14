"""Fixtures of the runtime tests (compiled graphs, memory plan, direct binding)."""
from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random inputs every run; the seed is printed (shown when the test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed} for {request.node.name}")
    return np.random.default_rng(seed)

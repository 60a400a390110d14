"""The one test that exists to prove installation: `pip install -r requirements-dev.txt`
installed every bundled distribution, and the core discovers each through its entry
point. (Whether each plugin *works* is for its own tests.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

BUNDLED = {"cpu": "hidet-plugin-cpu", "cuda": "hidet-plugin-cuda", "ops": "hidet-plugin-ops",
           "example": "hidet-plugin-example", "matmul": "hidet-plugin-matmul",
           "reduce": "hidet-plugin-reduce"}


def test_bundled_plugins_are_discovered_through_their_entry_points():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIDET_FRAMEWORK_")}
    result = subprocess.run([sys.executable, "-m", "hidet_framework", "plugins", "--json"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = {row["name"]: row["distribution"] for row in json.loads(result.stdout)}
    assert {name: found.get(name) for name in BUNDLED} == BUNDLED

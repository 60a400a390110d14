"""The five real ONNX models of ``../shared/models`` with their weights filled in.

The graphs ship without weights; ``../shared/tools/materialize_onnx.py`` writes a copy
with them. Every bench script that runs a shared model gets its file from here:

    with materialized(shared, "resnet50") as path:   # a temporary .onnx, removed after
        ...
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from typing import Iterator

MODELS = ["resnet50", "mobilenet_v2", "inception_v3", "bert_base_s128", "gpt2_s128"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shared_dir() -> str:
    """``../shared`` next to the repository (or a worktree's main checkout)."""
    for base in (os.path.join(ROOT, ".."), os.path.join(ROOT, "..", "..")):
        candidate = os.path.abspath(os.path.join(base, "shared"))
        if os.path.isdir(os.path.join(candidate, "models")):
            return candidate
    return os.path.abspath(os.path.join(ROOT, "..", "shared"))


def materialize(shared: str, name: str, folder: str) -> str:
    """Write ``folder/<name>.onnx``: the shared graph `name` with its weights; its path."""
    out = os.path.join(folder, name + ".onnx")
    subprocess.run([sys.executable, os.path.join(shared, "tools", "materialize_onnx.py"),
                    os.path.join(shared, "models", name + ".onnx"), out], check=True)
    return out


@contextlib.contextmanager
def materialized(shared: str, name: str) -> Iterator[str]:
    """`materialize` into a temporary folder that is removed on exit (the files are
    hundreds of MB: one model on disk at a time)."""
    with tempfile.TemporaryDirectory(prefix=f"hf-{name}-") as folder:
        yield materialize(shared, name, folder)

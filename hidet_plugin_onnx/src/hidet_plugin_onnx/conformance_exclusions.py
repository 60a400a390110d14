"""ONNX node tests that apply to claimed ops but are not run, each with the reason.
Patterns are full-match regular expressions over test names."""
from __future__ import annotations

EXCLUSIONS: list[tuple[str, str]] = [
]

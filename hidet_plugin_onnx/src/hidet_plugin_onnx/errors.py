"""What importing an ONNX model raises: one clear message per problem."""
from __future__ import annotations


class OnnxImportError(ValueError):
    """The model cannot be read or imported (bad file, bad graph, bad input_shapes...)."""


class UnsupportedOperatorsError(OnnxImportError):
    """Nodes this frontend cannot import, all listed at once.

    :param problems: one line per (op type, reason): the count, the node names and
        which plugin could provide what is missing.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("the model uses operators that cannot be imported:\n  " + "\n  ".join(problems))

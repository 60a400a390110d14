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


class KnownValueRequiredError(OnnxImportError):
    """A node needs an input's value at import (a shape, axes, pads...), but the value
    comes from the graph at run time. `graph_input` is the ONNX name of that input when
    it is a graph input (a caller that knows its value may bind it and import again)."""

    def __init__(self, message: str, graph_input: str | None) -> None:
        self.graph_input = graph_input
        super().__init__(message)

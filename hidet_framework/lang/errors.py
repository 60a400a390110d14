"""Errors of the script DSL, located in the user's source file.

A script function is read from its source text, so every mistake found while tracing
has a precise place: the message names the file, the line, and shows that line, the
way Python's own SyntaxError does.
"""
from __future__ import annotations

import ast
from typing import Optional

import attrs


class ScriptError(Exception):
    """A script function could not be turned into IR.

    :ivar filename: the user's source file. :ivar lineno: the line in that file.
    :ivar source_line: the text of that line (stripped). :ivar reason: what went wrong.
    """

    def __init__(self, reason: str, filename: str = "<unknown>", lineno: Optional[int] = None,
                 source_line: str = "") -> None:
        self.reason, self.filename, self.lineno, self.source_line = reason, filename, lineno, source_line
        where = f'File "{filename}", line {lineno}' if lineno is not None else f'File "{filename}"'
        text = f"{where}: {reason}"
        if source_line:
            text += f"\n    {source_line}"
        super().__init__(text)


@attrs.frozen
class SourceInfo:
    """Where a parsed function came from, to map AST line numbers back to the file.

    :param filename: the file the function was defined in.
    :param line_offset: added to AST line numbers (the source was parsed on its own).
    :param lines: the function's source lines as in the file (not dedented).
    """

    filename: str
    line_offset: int
    lines: tuple

    def file_line(self, node: Optional[ast.AST]) -> Optional[int]:
        lineno = getattr(node, "lineno", None)
        return None if lineno is None else lineno + self.line_offset

    def error(self, node: Optional[ast.AST], reason: str) -> ScriptError:
        lineno = self.file_line(node)
        text = ""
        if lineno is not None:
            k = lineno - self.line_offset - 1
            if 0 <= k < len(self.lines):
                text = self.lines[k].strip()
        return ScriptError(reason, self.filename, lineno, text)

    def segment(self, node: ast.AST) -> str:
        """The source text of `node` (for assertion messages)."""
        try:
            return ast.unparse(node)
        except Exception:  # unparse is best-effort; a message is never worth a crash
            return "<expr>"

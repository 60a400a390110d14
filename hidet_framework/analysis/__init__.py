"""Analyses over the IR: value bounds of expressions and the pure-Python evaluator."""

"""The expression simplifier: one rewriter (``simplify.py``) and its rule families."""

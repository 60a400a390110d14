"""hidet-plugin-ops: injective, elementwise, shape and pooling operators, and graph
rewrite rules (e.g. conv2d → matmul), contributed to hidet-framework through the
``hidet_framework`` entry-point group.

Its hook implementations arrive with the issues that add these operators.
"""

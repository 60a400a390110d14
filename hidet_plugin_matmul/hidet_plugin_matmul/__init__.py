"""hidet-plugin-matmul: the matmul and batch_matmul operators and their templates
(CPU, CUDA SIMT, CUDA tensor core) with their hardware-centric schedule spaces.

Its hook implementations arrive with the issues that add these templates.
"""

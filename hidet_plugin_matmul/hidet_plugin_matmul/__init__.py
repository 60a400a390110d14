"""hidet-plugin-matmul: the matmul and batch_matmul operators and their templates
(CPU, CUDA SIMT, CUDA tensor core) with their hardware-centric schedule spaces."""
from hidet_framework.extension import hookimpl

from hidet_plugin_matmul.operators import batch_matmul, matmul


@hookimpl
def register_operators(register):
    register("matmul", matmul)
    register("batch_matmul", batch_matmul)

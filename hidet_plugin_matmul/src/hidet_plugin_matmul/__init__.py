"""hidet-plugin-matmul: the matmul and batch_matmul operators and their templates
(CPU, CUDA SIMT, CUDA tensor core with mma.sync and with Hopper's wgmma) with their hardware-centric schedule spaces."""
from hidet_framework.extension import hookimpl

from hidet_plugin_matmul.operators import batch_matmul, matmul


@hookimpl
def register_operators(register):
    register("matmul", matmul)
    register("batch_matmul", batch_matmul)
    from hidet_plugin_matmul.cuda_conv_op import OPERATOR, conv2d_igemm

    register(OPERATOR, conv2d_igemm)


@hookimpl
def register_templates(register):
    # Imported here so the operators stay importable even if a template module breaks.
    from hidet_plugin_matmul.cpu_template import CpuPackedMatmul

    register("matmul.cpu_packed", CpuPackedMatmul())
    from hidet_plugin_matmul.cpu_gemv import CpuPrepackedMatmul

    register("matmul.cpu_gemv", CpuPrepackedMatmul())
    from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul
    from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul
    from hidet_plugin_matmul.cuda_gemv import CudaGemvMatmul
    from hidet_plugin_matmul.cuda_splitk import CudaSimtSplitKMatmul
    from hidet_plugin_matmul.cuda_hopper_skinny import CudaHopperSkinnyMatmul

    register("matmul.cuda_simt", CudaSimtMatmul())
    register("matmul.cuda_tensor_core", CudaTensorCoreMatmul())
    register("matmul.cuda_wgmma", CudaWgmmaMatmul())
    register("matmul.cuda_gemv", CudaGemvMatmul())
    register("matmul.cuda_simt_splitk", CudaSimtSplitKMatmul())
    register("matmul.cuda_hopper_skinny", CudaHopperSkinnyMatmul())
    from hidet_plugin_matmul.cuda_hopper_ws import CudaHopperWsMatmul

    register(CudaHopperWsMatmul.name, CudaHopperWsMatmul())
    from hidet_plugin_matmul.cuda_conv import CudaConvImplicitGemm

    register(CudaConvImplicitGemm.name, CudaConvImplicitGemm())


@hookimpl
def register_passes(register):
    # short-M matmul with constant weights: B packed once at compile time (CPU)
    from hidet_plugin_matmul.cpu_prepack import PREPACK_RULE

    register(PREPACK_RULE.name, PREPACK_RULE)
    # fp16/bf16 conv2d on cuda: one implicit-GEMM kernel (before the ops plugin's im2col rule)
    from hidet_plugin_matmul.cuda_conv import CONV_IGEMM_RULE

    register(CONV_IGEMM_RULE.name, CONV_IGEMM_RULE)

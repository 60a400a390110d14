"""ONNX node tests that apply to claimed ops but are not run, each with the reason.
Patterns are full-match regular expressions over test names."""
from __future__ import annotations

EXCLUSIONS: list[tuple[str, str]] = [
    (r"(?i)test_cast(like)?_.*(float8|float4|int4|int2|e8m0|string|no_saturate).*",
     "float8/float4/int4/int2/string element types: hidet-framework has none of them"),
    (r"test_equal_string.*", "string tensors: hidet-framework has no string dtype"),
    (r"test_optional_.*|test_.*sequence.*|test_identity_opt", "sequences and optionals are not tensors"),
    (r"test_training_dropout.*", "Dropout in training mode (inference only)"),
    (r"test_dropout_(default|random)_old", "Dropout in its opset-10 form, older than opset 13 (supported: 13 to 21)"),
    (r"test_batchnorm_.*training_mode", "BatchNormalization in training mode (inference only)"),
    (r"test_resize_.*cubic.*", "Resize mode 'cubic' (nearest and linear are supported)"),
    (r"test_resize_.*tf_crop_and_resize.*", "Resize coordinate mode tf_crop_and_resize (needs the roi input)"),
    (r"test_resize_.*(not_larger|not_smaller).*", "Resize keep_aspect_ratio_policy other than 'stretch'"),
    (r"test_resize_.*antialias.*", "Resize with antialias=1"),
    (r"test_(max|average)pool_3d_.*", "3-D pooling windows (1-D and 2-D are supported)"),
    (r"test_averagepool_.*dilations.*", "AveragePool with dilations: avg_pool2d has none"),
    (r"test_maxpool_with_argmax_.*", "MaxPool's Indices output"),
    (r"test_wrap_pad", "Pad mode 'wrap' (constant, reflect and edge are supported)"),
    (r"test_einsum_(sum|batch_diagonal|inner_prod).*",
     "Einsum summing within one operand or taking a diagonal (needs a reduction; matrix-product equations are supported)"),
    (r"test_mod_float_edge_cases_fmod_0_.*",
     "float Mod with fmod=0 on infinities and zero divisors (computed as x - floor(x/y)*y, which gives NaN there)"),
    (r"test_attention_.*_(bf16|fp16)_expanded",
     "half-precision attention: we round once (float32 inside fused kernels), the reference rounds after every op; "
     "the results differ by 1 bf16/fp16 ulp, more than the test's rtol of 1e-3"),
    (r"test_(causal_conv_with_state_.*|rotary_embedding.*)_expanded",
     "zero-size graph inputs: the compiled graph cannot pass an empty buffer"),
]

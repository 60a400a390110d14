"""Every graph rewrite rule the installed plugins register is a
``hidet_framework.extension.RewriteRule`` registered under its own name (so the
engine's warnings and ``rules_off`` speak of the same name), with a description."""
from __future__ import annotations

from hidet_framework.extension import RewriteRule, plugin_host, points, registered_rule_names


def test_every_registered_rule_is_the_core_descriptor_under_its_own_name():
    passes = plugin_host().passes
    names = registered_rule_names()
    # the bundled plugins' rules (hidet_plugin_ops, hidet_plugin_matmul)
    assert {"conv2d_to_matmul", "fuse_attention", "fuse_horizontal_matmul", "split_to_slices",
            "fold_batch_norm_into_conv2d", "prepack_constant_b", "conv2d_pack_weights",
            "conv2d_implicit_gemm_cuda"} <= set(names), names
    for name in names:
        rule = passes[name]
        assert isinstance(rule, RewriteRule), (name, type(rule))
        assert rule.name == name and rule.point == points.GRAPH_REWRITE and rule.description, rule

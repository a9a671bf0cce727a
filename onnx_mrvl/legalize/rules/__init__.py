"""The legalization rules, in the order the driver applies them.

Each rule module has ``NAME``, ``OPS`` (the op types it looks at; None: every node), ``match(node, graph) -> Match | None``,
``check(match, graph, target) -> reason | None`` and ``rewrite(match, graph) -> detail``.
"""
from . import (avgpool_calibrate, bn_into_conv, bn_to_mul_add, clip_canonical, conv_1d_to_2d,
               conv_attrs, conv_group_split, conv_kernel_split, depth_to_space, fold_constants, gap_split,
               gemm_canonical, matmul_to_gemm, merge_transposes, pad_fold, reducemean_to_gap,
               relu6_to_clip, remove_dropout, remove_identity, remove_noop, reshape_static,
               sub_div_const, sum_to_add, to_reshape)
from .base import Match

RULES = (
    fold_constants,
    remove_identity,
    remove_dropout,
    remove_noop,
    merge_transposes,
    sum_to_add,
    sub_div_const,
    clip_canonical,
    relu6_to_clip,
    to_reshape,
    depth_to_space,
    reshape_static,
    gemm_canonical,
    matmul_to_gemm,
    conv_attrs,
    bn_into_conv,
    bn_to_mul_add,
    pad_fold,
    conv_1d_to_2d,
    conv_group_split,
    conv_kernel_split,
    avgpool_calibrate,
    reducemean_to_gap,
    gap_split,
)

RULE_NAMES = tuple(r.NAME for r in RULES)

__all__ = ["RULES", "RULE_NAMES", "Match"]

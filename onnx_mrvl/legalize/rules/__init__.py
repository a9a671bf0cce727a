"""The legalization rules, in the order the driver applies them.

Each rule module has ``NAME``, ``OPS`` (the op types it looks at; None: every node), ``match(node, graph) -> Match | None``,
``check(match, graph, target) -> reason | None`` and ``rewrite(match, graph) -> detail``.
"""
from . import (affine_into_conv, avgpool_calibrate, bn_into_conv, bn_to_mul_add, clip_canonical, conv_1d_to_2d,
               conv_attrs, conv_dead_taps, conv_group_split, conv_kernel_split, convtranspose_phases,
               convtranspose_to_conv, crop_to_conv, depth_to_space, einsum_to_matmul, fold_constants, gap_split, gemm_canonical,
               hardswish_canonical, matmul_to_gemm, merge_transposes, pad_fold, pad_sink, pad_to_conv, pad_unit_axes,
               reduce_axis_to_pool, reduce_sum_split, reducemean_to_gap, relu6_to_clip, remove_dropout, remove_identity,
               remove_noop, repeat_to_resize, reshape_static, resize_nearest, split_3d_to_4d, sub_div_const,
               sum_to_add, tensordot_to_matmul, to_reshape)
from . import grn_norm, group_norm, layernorm_canonical
from . import pad_reflect_gather
from . import conv_3d_to_2d, conv_dilation_fold, conv_phase_s2d, squeeze_sink
from . import dynamic_dq_moves, dynamic_int_bias, dynamic_int8, dynamic_lstm, qlinear_passthrough, qlinear_to_qdq
from . import (contrib_attention, contrib_cached, contrib_embed, contrib_fused, contrib_gelu, contrib_norm,
               contrib_nbits, contrib_qattention, contrib_qembed, contrib_rotary)
from . import qdq_convtranspose, qdq_dedupe, qdq_float_bias, qdq_int8_output, qdq_pad_fold, qdq_uint8_weights, qdq_weight_moves
from . import qdq_double_pair, qdq_requant_before_layout
from . import batched_const_matmul, expand_to_concat, last_axis_ones, mask_fill_add, signed_permute, strided_slice_view, \
    where_const_cond
from . import nan_guard_dq, qdq_batched_const_matmul, qdq_infinite_softmax, qdq_mask_select, qdq_move_chain, \
    qdq_input_pair, qdq_pair_before_move, qdq_pool_move, qdq_unique_dq
from . import (avgpool_global, convtranspose_phase_conv, matmul_rank_align, reducesum_to_mean, sigmoid_expanded,
               softplus_threshold, sub_tensors, unbind_to_gather)
from . import slice_through_transpose, strided_slice_split
from . import loop_to_rnn, reverse_sequence_gather, rnn_length_sort
from . import center_before_transpose, sigmoid_difference, softmax_flatten_last
from . import pow_square
from . import log_range_scale
from . import log_floor_clamp
from . import log_eps_floor
from . import l2_normalize
from . import const_lhs_matmul, gathered_spatial_map, scatter_to_concat
from . import qdq_const_group
from . import pad_channel_concat, qdq_pad_channel, qdq_pool_transpose
from . import div_host_divisor, grouped_transpose, if_static_branch
from . import ms_qdq_domain
from . import qdq_int_bias_rescale, qdq_split_pair, qdq_channel_input, qdq_stack_sum
from . import conv_dense_toeplitz, gmp_split, layernorm_moments, softmax_expanded
from . import split_of_concat
from . import conv_dilation_phases, minmax_const_first, slice_reverse_gather
from .base import Match

RULES = (
    fold_constants,
    qlinear_to_qdq,
    qlinear_passthrough,
    dynamic_int_bias,
    dynamic_int8,
    dynamic_lstm,
    ms_qdq_domain,
    if_static_branch,
    dynamic_dq_moves,
    qdq_const_group,
    qdq_dedupe,
    contrib_qattention,
    contrib_attention,
    contrib_qembed,
    contrib_nbits,
    contrib_embed,
    contrib_norm,
    contrib_gelu,
    contrib_rotary,
    contrib_cached,
    contrib_fused,
    softmax_flatten_last,
    qdq_unique_dq,
    nan_guard_dq,
    qdq_infinite_softmax,
    qdq_mask_select,
    qdq_pool_transpose,
    qdq_pool_move,
    qdq_move_chain,
    qdq_pair_before_move,
    qdq_input_pair,
    qdq_weight_moves,
    qdq_uint8_weights,
    qdq_float_bias,
    qdq_int_bias_rescale,
    qdq_split_pair,
    qdq_channel_input,
    qdq_int8_output,
    qdq_requant_before_layout,
    qdq_pad_fold,
    qdq_pad_channel,
    qdq_convtranspose,
    qdq_double_pair,
    remove_identity,
    remove_dropout,
    remove_noop,
    loop_to_rnn,
    reverse_sequence_gather,
    slice_reverse_gather,
    rnn_length_sort,
    gathered_spatial_map,
    scatter_to_concat,
    einsum_to_matmul,
    grouped_transpose,
    merge_transposes,
    center_before_transpose,
    layernorm_canonical,
    layernorm_moments,
    softmax_expanded,
    group_norm,
    grn_norm,
    sum_to_add,
    minmax_const_first,
    sub_div_const,
    div_host_divisor,
    where_const_cond,
    mask_fill_add,
    signed_permute,
    l2_normalize,      # before expand_to_concat / clip_canonical rewrite F.normalize's Expand / Clip
    expand_to_concat,
    strided_slice_view,
    strided_slice_split,
    const_lhs_matmul,
    qdq_batched_const_matmul,
    batched_const_matmul,
    last_axis_ones,
    sigmoid_difference,
    sub_tensors,
    pow_square,
    sigmoid_expanded,
    softplus_threshold,
    unbind_to_gather,
    clip_canonical,
    log_range_scale,
    log_floor_clamp,
    log_eps_floor,
    relu6_to_clip,
    hardswish_canonical,
    to_reshape,
    depth_to_space,
    reshape_static,
    repeat_to_resize,
    tensordot_to_matmul,
    matmul_rank_align,
    gemm_canonical,
    matmul_to_gemm,
    conv_attrs,
    bn_into_conv,
    bn_to_mul_add,
    affine_into_conv,
    pad_unit_axes,
    pad_sink,
    pad_fold,
    pad_to_conv,
    pad_channel_concat,
    pad_reflect_gather,
    convtranspose_phases,
    convtranspose_to_conv,
    convtranspose_phase_conv,
    conv_dense_toeplitz,
    conv_dead_taps,

    conv_dilation_phases,
    conv_dilation_fold,
    conv_1d_to_2d,
    squeeze_sink,
    conv_3d_to_2d,
    split_3d_to_4d,
    slice_through_transpose,
    conv_group_split,
    conv_phase_s2d,
    conv_kernel_split,
    avgpool_calibrate,
    avgpool_global,
    reducesum_to_mean,
    reducemean_to_gap,
    reduce_axis_to_pool,
    qdq_stack_sum,
    reduce_sum_split,
    split_of_concat,
    gap_split,
    gmp_split,
    resize_nearest,
    crop_to_conv,
)

RULE_NAMES = tuple(r.NAME for r in RULES)

__all__ = ["RULES", "RULE_NAMES", "Match"]

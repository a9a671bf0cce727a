"""How an int8 Conv2D beyond the MAC array's per-pass limits runs (docs/fusion.md "int8", the
target description in target.py): pure geometry, shared by fuse (is it taken) and the compile
step / perf model (its passes and MACs).

An int8 conv accumulates exact int32 sums and requantizes once, so any tiling of its sum gives
the same result. The lowering (assumption: the MLIP's compiler does it; no public datasheet):

- **stride s > ``max_stride``** along an axis (dilation 1 there): space-to-depth of the int8 input
  codes by blocks of s (data movement: the codes are re-addressed while loaded, the padding holds
  the zero point code), a stride-1 conv over ``s x`` the channels with the int8 weights re-indexed
  alike (``e = (-pad_begin) mod s`` leading zero taps, ``ceil((e + k) / s)`` block taps; the
  per-output-channel scales unchanged; the padding becomes ``ceil(pad / s)`` blocks);
- **kernel side > ``max_kernel``** (after that): tiles of at most ``max_kernel`` taps, each one pass
  of the MAC array into the same int32 accumulator (no requantization between passes), one
  requantization after the last pass; each pass addresses the input window its tile reads (the
  reads beyond the map are padding, zero-point codes adding 0: skipped), so a tiled axis has no
  per-pass padding (wav2vec2's positional conv, k 16-128 with pad k / 2);
  (a depthwise conv too: RepLKNet-style large kernels);
- **dilation d > ``max_dilation``** along an axis (stride within the limit): one pass per tap along
  that axis, each a 1-tap conv whose input window is the map shifted by the tap's offset ``i * d -
  pad`` and whose output window is the positions where that shifted read lands in the map (the
  other reads are padding: zero-point codes, ``(q - z) = 0``, nothing to add), so a pass has no
  padding and no dilation along that axis (DeepLabV3's ASPP rates 12 / 24: 3 passes per axis);
- **grouped (not depthwise)**: one pass per group, a dense conv over that group's ``C / g`` input
  channels into its ``O / g`` outputs (the accumulators of the other groups untouched).

The perf model counts ``passes`` (each extra pass costs ``layer_overhead_cycles``: assumption)
and the MACs of the lowered kernel (the zero taps of the re-indexing included).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple, Union


@dataclass(frozen=True)
class ConvPasses:
    blocks: Tuple[int, int]        # space-to-depth block per axis (1: none)
    kernel: Tuple[int, int]        # kernel after space-to-depth (taps per axis)
    channels: int                  # input channels per group after space-to-depth
    tiles: Tuple[int, int]         # kernel tiles per axis (passes into one accumulator)
    groups: int
    pads: Tuple[int, int, int, int] = (0, 0, 0, 0)   # after space-to-depth (in blocks along such an axis)

    @property
    def passes(self) -> int:
        return self.tiles[0] * self.tiles[1] * (self.groups if self.groups > 1 and self.channels_in_group > 1 else 1)

    @property
    def channels_in_group(self) -> int:
        return self.channels // (self.blocks[0] * self.blocks[1])

    @property
    def macs_per_output(self) -> int:
        """MACs of one output value in the lowered form (its re-indexed zero taps included)."""
        return self.kernel[0] * self.kernel[1] * self.channels


def plan(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], pads: Sequence[int],
         in_per_group: int, groups: int, max_kernel: int, max_stride: int, max_channels: int,
         depthwise: bool = False, max_dilation: int = 0) -> Union[ConvPasses, str]:
    """The passes of an int8 conv (kernel [kh, kw], pads [t, l, b, r], ``in_per_group`` input
    channels per group), or the reason it has no such lowering. ``max_dilation`` (0: not lowered):
    an axis dilated beyond it runs one tap per pass."""
    blocks, ks, tiles, tap_axes = [], [], [], []
    for a in range(2):
        k, s, d, p = int(kernel[a]), int(strides[a]), int(dilations[a]), int(pads[a])
        if max_dilation and d > max_dilation and k > 1:
            if s > max_stride:
                return f"stride {list(strides)} exceeds the limit {max_stride} with dilation {list(dilations)}"
            blocks.append(1)
            ks.append(k)
            tiles.append(k)          # one tap per pass: no dilation, no padding inside a pass
            tap_axes.append(a)
            continue
        if s > max_stride:
            if depthwise:
                return f"stride {list(strides)} exceeds the limit {max_stride} (a depthwise conv has no space-to-depth lowering)"
            if d != 1 and k > 1:
                return f"stride {list(strides)} exceeds the limit {max_stride} with dilation {list(dilations)}"
            e = (-p) % s
            blocks.append(s)
            k = -(-(e + k) // s)
        else:
            blocks.append(1)
        ks.append(k)
        tiles.append(-(-k // max_kernel))
    windowed = set(tap_axes) | {a for a in range(2) if tiles[a] > 1}   # passes address shifted windows
    lowered = tuple(0 if i % 2 in windowed else -(-int(p) // blocks[i % 2]) for i, p in enumerate(pads))
    channels = in_per_group * blocks[0] * blocks[1]
    if channels * groups > max_channels:
        return (f"space-to-depth by {blocks[0]}x{blocks[1]} gives {channels * groups} input channels, "
                f"above the limit {max_channels}")
    return ConvPasses(tuple(blocks), tuple(ks), channels, tuple(tiles), int(groups), lowered)

"""The target description: the accelerator's limits and its performance profile, as data.

Legalize, fuse, split, compile and the simulator all read their limits from here; nothing else
hard-codes them. Numbers Marvell has not published are assumptions and say so.

Recurrent layers (LSTM / GRU / RNN, docs/fusion.md) are lowered onto the same units: per timestep
the MAC array computes the gate GEMM ``[x_t | h_{t-1}] x [W | R]^T`` (an FC of K = I + H, O = G*H;
fp16 operands, fp32 accumulation; W and R from the on-chip memory), the vector unit the biases,
sigmoid / tanh and the cell update in fp32, and the state goes back to the on-chip memory in fp16.
Their per-step GEMM obeys ``max_fc_features``; ``ArchProfile.recurrent_step_cycles`` is the
assumed latency between timesteps. An int8 recurrent layer (``INT8_RECURRENT_LOWERING``) runs its
input projection on the int8 MAC path and its recurrent product on the fp16 one.

An int8 Conv2D beyond ``max_kernel`` / ``max_stride`` / ``max_dilation`` or grouped (not depthwise)
runs as passes of the MAC array into one int32 accumulator, requantized once (``int8_conv_passes.py``,
docs/fusion.md "int8"): a space-to-depth of the int8 input codes for a stride above ``max_stride``,
kernel tiles of at most ``max_kernel`` taps, one tap per pass along an axis dilated beyond
``max_dilation`` (shifted input / output windows, no padding), one pass per group; each extra pass costs ``layer_overhead_cycles``
in the perf model (assumption).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import json
import os
from typing import Dict, Optional, Tuple

ACTIVATIONS: Tuple[str, ...] = (
    "relu", "clamp", "leaky_relu", "prelu", "sigmoid", "tanh", "hard_sigmoid", "hard_swish", "silu",
    "gelu", "gelu_tanh", "elu", "mish", "erf", "softplus", "sqrt", "log",
)


@dataclass(frozen=True)
class ArchProfile:
    """Performance model parameters. Every default is an assumption (no public MLIP datasheet)."""

    num_tiles: int = 4                  # RFC example: --num_tiles=4
    ocm_size: int = 0x100000            # RFC example: 1 MiB on-chip memory per tile
    macs_per_cycle_per_tile: int = 1024  # assumption: fp16 MACs per cycle per tile
    clock_hz: float = 1.0e9             # assumption: 1 GHz
    dram_bytes_per_cycle: float = 32.0  # assumption: ~32 GB/s at 1 GHz
    layer_overhead_cycles: int = 200    # assumption: fixed per-layer setup cost
    transfer_bytes_per_s: float = 8.0e9  # assumption: host <-> accelerator copy bandwidth
    call_overhead_s: float = 20e-6      # assumption: fixed cost of one accelerator invocation
    vector_ops_per_cycle_per_tile: int = 64  # assumption: fp32 vector-unit lanes per tile (LayerNorm,
                                             # Softmax, smooth activations: VECTOR_LOWERINGS)
    recurrent_step_cycles: int = 64     # assumption: per LSTM/GRU/RNN timestep, MAC drain + vector
                                        # unit (activations, cell update) + state write (docs/fusion.md)
    int8_macs_factor: float = 2.0       # assumption: int8 MACs per cycle = 2x the fp16 rate (int8 layers)

    ASSUMPTIONS = ("macs_per_cycle_per_tile", "clock_hz", "dram_bytes_per_cycle",
                   "layer_overhead_cycles", "transfer_bytes_per_s", "call_overhead_s",
                   "vector_ops_per_cycle_per_tile", "recurrent_step_cycles", "int8_macs_factor")


@dataclass(frozen=True)
class CpuProfile:
    """The host CPU as the cost model sees it (calibrate with tools/calibrate_cpu.py)."""

    macs_per_s: float = 2.0e10          # assumption until calibrated: onnxruntime fp32 on 2 cores
    op_overhead_s: float = 5e-6         # assumption: fixed cost per CPU op
    bytes_per_s: float = 1.0e10         # assumption: bytes an elementwise op reads + writes per second
    source: str = "default"             # "default" or the calibration file it was loaded from

    @classmethod
    def load(cls, path: str) -> "CpuProfile":
        """A profile written by tools/calibrate_cpu.py (JSON with the fields above)."""
        from .errors import ModelError

        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read the CPU calibration {path}: {exc}",
                             hint="run `python tools/calibrate_cpu.py` to (re)write it") from None
        fields = {"macs_per_s", "op_overhead_s", "bytes_per_s"}
        values = {k: float(v) for k, v in data.items() if k in fields}
        bad = [k for k, v in values.items() if not v > 0]
        if bad or not values:
            raise ModelError(f"CPU calibration {path} has no usable fields (bad: {bad})",
                             hint="run `python tools/calibrate_cpu.py` to rewrite it")
        return cls(**values, source=path)


CPU_PROFILE_ENV = "ONNX_MRVL_CPU_PROFILE"


def default_cpu_profile_path() -> str:
    """Where tools/calibrate_cpu.py writes by default: $ONNX_MRVL_CPU_PROFILE or ~/.cache/onnx_mrvl/cpu.json."""
    return os.environ.get(CPU_PROFILE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "onnx_mrvl", "cpu.json")


@dataclass(frozen=True)
class Target:
    """Limits of the MLIP accelerator as the flow understands them."""

    name: str = "mlip"
    max_batch: int = 8                     # TVM's Marvell integration: static batch <= 8
    max_kernel: int = 7                    # largest conv kernel side taken as is (larger: split)
    max_pool_kernel: int = 16              # largest pooling window side (a global pool: up to its square per side)
    max_pad: Dict[str, int] = field(default_factory=lambda: {"conv": 7, "pool": 7})
    max_stride: int = 8
    max_dilation: int = 8
    max_channels: int = 8192               # channels per layer (in and out); also the row a LayerNorm
                                           # normalises in one pass
    max_norm_features: int = 1 << 22       # LayerNorm / RMSNorm row above max_channels: blocked passes
                                           # (NORM_BLOCKED_LOWERING; assumption)
    max_fc_features: int = 65536           # also K and N of a BatchMatMul (two activations), which
                                           # is assumed to run on the FC's MAC array with its second
                                           # operand streamed from OCM instead of the weights
                                           # (transpose_b: that operand in the kernel's OI order)
    activations: Tuple[str, ...] = ACTIVATIONS
    dtypes: Tuple[str, ...] = ("float32",)
    fp16_max: float = 65504.0
    resize_max_scale: int = 8             # Resize: nearest repeat factor (also ConvTranspose phases)
    resize_linear_max_scale: int = 32     # bilinear Resize up/down factor per axis. Assumption: the
                                           # separable 2-tap interpolation (docs/fusion.md) reads a
                                           # per-row / per-column (index, weight) table whose size is the
                                           # output size, 2 source rows per output row: nothing depends on
                                           # the factor; 32 covers segmentation heads' output strides
                                           # (DeepLab x16, FCN-32s / BiSeNet / U^2-Net up to x32)
    max_region_io: int = 16                # region inputs / outputs passed unpacked by the runtime
                                           # (ep/runtime_form.MAX_ARITY): independent regions are
                                           # merged into one only up to this many (split/merge.py)
    avgpool_exclude_pad: bool = True       # AveragePool count_include_pad=0 taken as is (else
                                           # legalize calibrates it: include pads + Mul by a map)
    arch: ArchProfile = field(default_factory=ArchProfile)
    cpu: CpuProfile = field(default_factory=CpuProfile)

    def with_arch(self, **changes) -> "Target":
        return dataclasses.replace(self, arch=dataclasses.replace(self.arch, **changes))

    def replace(self, **changes) -> "Target":
        return dataclasses.replace(self, **changes)

    def with_calibration(self, path: Optional[str] = None) -> "Target":
        """This target with the CPU profile measured by tools/calibrate_cpu.py (``path``, else
        $ONNX_MRVL_CPU_PROFILE, else ~/.cache/onnx_mrvl/cpu.json). Never applied implicitly."""
        return dataclasses.replace(self, cpu=CpuProfile.load(path or default_cpu_profile_path()))


DEFAULT_TARGET = Target()


def get_target(target=None) -> Target:
    """Accept None (the default), a Target, or a dict of overrides (``{"arch": {...}}`` for the
    ArchProfile's fields); anything else, or a key that is no field, is a ``UsageError``."""
    from .errors import UsageError
    from .options import suggest
    if target is None:
        return DEFAULT_TARGET
    if isinstance(target, Target):
        return target
    if not isinstance(target, dict):
        raise UsageError(f"target must be None, a Target or a dict of overrides, not {type(target).__name__} "
                         f"{target!r:.40}", hint="e.g. target={'arch': {'num_tiles': 4}} (CLI: --num-tiles 4)")
    arch = target.get("arch") or {}
    rest = {k: v for k, v in target.items() if k != "arch"}
    for given, cls, what in ((rest, Target, "target"), (arch, ArchProfile, "target['arch']")):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = [str(k) for k in (given if isinstance(given, dict) else {"<not a dict>": 0}) if k not in fields]
        if unknown:
            hint = suggest(unknown, fields)
            raise UsageError(f"{what} has no field {', '.join(map(repr, unknown))} (fields: {sorted(fields)})",
                             hint=(hint + " " if hint else "") + "use the field names of onnx_mrvl.target."
                                  + cls.__name__)
    t = dataclasses.replace(DEFAULT_TARGET, **rest)
    return t.with_arch(**arch) if arch else t


# The int8 layers' int32 accumulator (docs/fusion.md "int8"; sim/int8.py wrap_int32; fuse/int8_accumulator.py).
INT8_ACCUMULATOR = ("int32, two's complement adders without saturation logic (assumption): a sum beyond the "
                    "int32 range wraps modulo 2^32, as onnxruntime's MLAS kernels (vpdpbusd / vpaddd) compute "
                    "QLinearConv / QGemm; the int32 bias is the accumulator's start value; the requantization "
                    "reads the int32 value as it stands")

# int8-in / fp16-out Conv2D / FC (precision "int8_in", docs/fusion.md "int8"; fuse/qdq_int8_in.py):
# the int8 layers' datapath up to the accumulator, the fp16 layers' output stage after it.
INT8_IN_LOWERING = ("input: quantize fp16 -> int8 / uint8 with the layer's scale and zero point (round "
                    "half to even, saturate), as an int8 layer's input (or int8 codes as stored); MAC array: "
                    "int8 x int8 -> int32 at int8_macs_factor x the fp16 rate, int8 weights; output stage "
                    "(assumption: the int8 requantization's fp32 multiplier path without the round / "
                    "saturate): int32 -> fp32, one multiply by fp32(s_x * s_w[o]) per channel, fp32 bias add, "
                    "the activation as an fp16 layer's epilogue, fp16 write (2 bytes per element); optional "
                    "(outq / post_ops, NNCF placement): up to 4 scalar fp32 multiply / add (or one per-channel fp32 divide: "
                    "NNCF's per-channel quantized depthwise inputs) after the activation and "
                    "the int8 requantization's round / saturate then one multiply back by the scale, before the fp16 "
                    "write (vector-unit ops per element, assumption: hidden under the MAC array's time, not charged)")

# int8 Conv2D / FC with a weight zero point (weight_zero_points, docs/fusion.md "int8"): as MLAS QGEMM.
INT8_WEIGHT_ZP_LOWERING = (
    "MAC array int8 x int8 -> int32 of (q_x - z_x) * q_w as for symmetric weights; the row sum "
    "r = sum (q_x - z_x) of each output's K inputs by one extra all-ones output column per group (assumption: "
    "charged as MACs, zero_point_macs); output stage: acc[o] - z_w[o] * r (one multiply-subtract per output, "
    "vector unit), then the bias and the int8 requantization as usual; exact: the sum is "
    "sum (q_x - z_x)(q_w[o] - z_w[o]); uint8 weights stored as q - 128 with z - 128")

# int8 LSTM / GRU / RNN (precision "int8_in" / "int8", docs/fusion.md "int8 recurrent layers";
# fuse/qdq_recurrent.py): assumptions, as for the int8-in layers.
INT8_RECURRENT_LOWERING = (
    "input projection, all timesteps before the loop: quantize x to int8 / uint8 codes with the layer's scale "
    "and zero point (vector unit, or codes as stored), MAC array int8 x int8 -> int32 at int8_macs_factor x the "
    "fp16 rate against the int8 W codes; a weight zero point z_w (per gate row) is applied as "
    "acc - z_w * sum(q_x - z_x), the row sum of the input codes computed once per timestep by one extra "
    "all-ones column of the array; output stage int32 -> fp32 times fp32(s_x * s_w[row]) plus the fp32 "
    "biases, kept in an fp32 buffer of T x G*H per direction (on-chip); per timestep: MAC array fp16 h_{t-1} "
    "x the R codes expanded to fp16 (exact: |q - z| <= 255) with fp32 accumulation at the fp16 rate, "
    "times fp32 s_r[row] in the output stage, added to the step's row of the projection; the vector unit's "
    "gates and cell update in fp32, h_t / c_t stored fp16 (the fp16 recurrent layer's); with an output "
    "quantization the step's fp32 h_t is also quantized to Y's int8 code (1 byte per element). Option "
    "(program field state_scale): h_{t-1} quantized per step and multiplied int8 x int8 at the int8 rate")

# The target description of what the accelerator computes off the MAC array: per Mrvl layer kind
# (and per smooth activation of a layer's epilogue), the unit, its lowering, and the vector-unit
# operations per element the performance model charges (``ArchProfile.vector_ops_per_cycle_per_tile``).
NORM_BLOCKED_LOWERING = (
    "a LayerNorm / RMSNorm row longer than max_channels (PoolFormer's GroupNorm(1) over C*H*W, a GroupNorm's "
    "wide groups) runs in blocks of at most max_channels values through the vector unit: pass 1 sums each "
    "block in fp32 and adds the block sums into one fp32 accumulator (the mean), pass 2 likewise the squared "
    "deviations (the variance; skipped by RMSNorm, which sums squares in pass 1), pass 3 normalises block by "
    "block with the row's 1/sqrt(var + eps), gamma, beta. Assumption: the same 8 operations per element plus "
    "the row's 2 extra reads from on-chip memory, charged as 2 more vector operations per element "
    "(emit/transformer_layers.py); rows up to max_norm_features values (fp32 accumulation of the block sums)")



def norm_blocked_extra_ops(d: int, target: "Target") -> int:
    """Vector operations per element a LayerNorm row of ``d`` values costs beyond its one pass: 2 (the
    row's two extra reads, ``NORM_BLOCKED_LOWERING``) when it is longer than ``target.max_channels``."""
    return 2 if d > target.max_channels else 0


VECTOR_LOWERINGS: Dict[str, Tuple[str, int]] = {
    "LayerNorm": ("vector unit: sum-reduction for the mean, subtract, square, sum-reduction for the "
                  "variance, one rsqrt per row (Newton step on a LUT seed), multiply by it, gamma "
                  "multiply, beta add, fp16 round", 8),
    "Softmax": ("vector unit: max-reduction, subtract, exp by a LUT + polynomial approximation, "
                "sum-reduction, one reciprocal per row, multiply by it, fp16 round; with nan_fill a "
                "select writes the fill where the result is NaN (a row of -inf scores): +1 op", 6),
    "LogSoftmax": ("vector unit (the Softmax layer with log = 1): max-reduction, subtract, exp by a "
                   "LUT + polynomial approximation, sum-reduction, one log per row (assumption: LUT + "
                   "polynomial like exp), subtract it, fp16 round", 6),
    "Requantize": ("vector unit (assumption): multiply by 1 / scale in fp32, round half to even, add the "
                   "zero point, saturate, write the int8 / uint8 code (1 byte per element)", 3),
    "LRN": ("vector unit, NHWC (channels the contiguous lane axis): square, window sum along C as "
            "min(size, C) - 1 adds of channel-shifted squares (a 1-D all-ones depthwise filter across "
            "channels), multiply-add by alpha / size and bias, d^-beta as exp(-beta log d) (log and exp "
            "by LUT + polynomial), multiply by x, fp16 round; assumption: one operation each, the "
            "window's adds charged per tap by the compile step (emit/lrn_layer.py)", 8),
    "Lookup": ("vector unit (int8 Lookup, docs/fusion.md \"int8\"): quantize the input code, one "
               "gather from the layer's 256-entry table (per channel or shared, held in the vector "
               "unit's local memory), one byte out; assumption: one operation per element", 1),
    "divide": ("vector unit, fp32 (a Mul2D with divide = 1, fp32 chains only: fuse/qdq_f32chain.py): "
               "reciprocal seed by LUT, two Newton-Raphson steps, the product, one remainder correction "
               "step (a * r - q, fused multiply-add) for the correctly rounded quotient; assumption: one "
               "operation each, charged on top of the layer's element-wise MAC", 5),
    "GatherElements": ("DMA engine / vector unit (assumption): one indexed load per output element at the "
                       "offset the int32 index table gives (table read once per element), one store; no "
                       "arithmetic; one operation per element", 1),
    "gelu": ("epilogue on the vector unit: 0.5 x erfc(-x / sqrt 2), erfc as t exp(-z^2 + P9(t)) with "
             "t = 1 / (1 + z / 2) (reciprocal, degree-9 polynomial, exp by LUT)", 16),
    "gelu_tanh": ("epilogue on the vector unit: x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (cube, "
                  "exp by LUT, reciprocal)", 8),
    "erf": ("epilogue on the vector unit: 1 - erfc(x), erfc as t exp(-x^2 + P9(t)) with t = 1 / (1 + |x| / 2) "
            "(the gelu's erfc: reciprocal, degree-9 polynomial, exp by LUT)", 15),
    "elu": ("epilogue on the vector unit: x > 0 ? x : alpha (exp(x) - 1) (exp by LUT, select)", 3),
    "mish": ("epilogue on the vector unit: x tanh(log1p(exp(-|x|)) + max(x, 0)) (exp and log by "
             "LUT, tanh as a rational function)", 8),
    "softplus": ("epilogue on the vector unit: max(x, 0) + log1p(exp(-|x|)) (abs, exp and log by LUT, "
                 "max, add)", 5),
    "sqrt": ("epilogue on the vector unit: x * rsqrt(x) (rsqrt by LUT + one Newton step; 0 for x = 0, "
             "NaN for x < 0 as ONNX Sqrt)", 4),
    "log": ("epilogue on the vector unit: x = 2^e m with m in [1, 2) by exponent extraction (the fp32 "
            "exponent field, an integer op), log2(m) by a 32-entry table + degree-2 polynomial (one "
            "multiply-add pair), (e + log2 m) ln 2 + activation_beta (one multiply-add), then max with "
            "the floor activation_alpha (-FLT_MAX: none); 0 -> -inf, x < 0 -> NaN, +inf -> +inf as ONNX Log (sim/activations_smooth.py)", 5),
}


def lrn_ops_per_element(size: int, channels: int) -> int:
    """Vector-unit operations per element of an LRN (``VECTOR_LOWERINGS["LRN"]``'s fixed ones plus
    ``min(size, C) - 1`` window adds): the one count the compile step, the perf model and the cost
    partition charge."""
    return VECTOR_LOWERINGS["LRN"][1] + min(int(size), int(channels)) - 1

"""``onnx-mrvl compare A.onnx B.onnx``: per-tensor error and SNR of a converted model against its reference.

Exit code 0 when every compared tensor is within tolerance, 1 when one fails (the first failing
tensor and its original nodes are named), 3 when a model, input file or binary cannot be used.
With ``--fp16-baseline`` the exit code follows the baseline's verdicts instead: 1 when a tensor
exceeds the fp16 baseline (a likely conversion bug), 0 when every error is within fp16 rounding.
``--json`` prints only JSON on stdout (strict: a non-finite number is null plus a flag, see
``common.strict_json``). Random inputs take A's declared shapes; ``--input-shape`` fixes symbolic
dimensions (see ``inspection/inputs.py`` for the defaults).
"""
from __future__ import annotations

import os
import sys

from ..errors import UsageError
from ..inspection.compare import DEFAULT_ATOL, DEFAULT_RTOL
from .common import nonnegative_int, parse_input_shapes, print_json, tolerance


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare every tensor of a converted model with the reference model",
        description="Runs A (the reference, plain onnxruntime) and B (a converted model: a stage, or a "
                    "deployable model run through onnx_mrvl.InferenceSession with its regions on the "
                    "simulator) on the same inputs and compares every tensor that maps between them, "
                    "NHWC-stored tensors against their NCHW originals. Inside accelerator regions each "
                    "layer is compared through a simulator capture. A tensor passes when "
                    "max|ref - got| <= ATOL + RTOL * max|ref| (fp16-aware defaults). Each row also gives "
                    "the tensor's SNR in dB, and the layers adding the most noise are named (largest SNR "
                    "drops): with A the fp32 original of an int8 model, the quantization loss per layer. "
                    "With A a QDQ model its layers are read from onnxruntime's optimized plan of A (exposing "
                    "them would unfuse its QLinear groups) and compared by their int8 codes (share identical, "
                    "max code difference; pass: >= 99% identical, the rest within one quantum); the first "
                    "layer whose codes differ is named. "
                    "Exit code 0: all pass, 1: a tensor fails, 3: an input cannot be used.")
    p.add_argument("a", metavar="A.onnx", help="the reference model (usually the original)")
    p.add_argument("b", metavar="B.onnx", help="the converted model, or a `convert` output folder")
    p.add_argument("--inputs", metavar="F.npz", help=".npz (by input name, or arr_0...) or .npy; "
                                                     "seeded random inputs when absent")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--input-shape", action="append", metavar="NAME:D1,D2,...",
                   help="shape of the random input NAME, e.g. x:1,3,224,224 (repeatable; as convert's). "
                        "Without it a symbolic dimension takes the converted model's size, or 1 for the "
                        "batch; any other is an error")
    p.add_argument("--atol", type=tolerance, default=DEFAULT_ATOL,
                   help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    p.add_argument("--rtol", type=tolerance, default=DEFAULT_RTOL,
                   help=f"tolerance relative to the tensor's max |reference| (default {DEFAULT_RTOL:g}: "
                        "fp16 rounds to 2**-11 per layer and deep nets accumulate)")
    p.add_argument("--no-sim", action="store_true", help="do not compare inside accelerator regions")
    p.add_argument("--fp16-baseline", action="store_true",
                   help="also run A with every float tensor stored in fp16 (fp32 math: the simulator's "
                        "numeric model) and judge each tensor: 'within fp16 rounding' (our error <= 2x the "
                        "baseline's) or 'exceeds the fp16 baseline' (a likely bug; exit code 1); "
                        "discontinuous outputs (ArgMax, Sign, comparisons, Where...) by the elements that flip")
    p.add_argument("--exact-int8", action="store_true",
                   help="run A with the int8 weights of its dynamic-int8 integer ops re-coded as uint8 + 128 "
                        "(the same products; onnxruntime's U8U8 kernels sum them exactly): on x86 without VNNI "
                        "onnxruntime's U8S8 kernels saturate pairs of products (docs/quantize.md \"Dynamic int8 "
                        "models\")")
    p.add_argument("--limit", type=nonnegative_int, default=0, metavar="N", help="rows shown in text mode (0: all)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (and nothing else)")
    p.set_defaults(func=run)


def _model_path(path: str) -> str:
    return os.path.join(path, "model.onnx") if os.path.isdir(path) else path


def _not_a_conversion(path: str) -> None:
    """The reference (the first model) must be the original: a conversion's model.onnx there is the
    arguments' order swapped or the wrong file (the manifest beside it names it)."""
    from ..artifact.manifest import read
    folder = os.path.dirname(os.path.abspath(path))
    manifest = read(folder) if os.path.isfile(path) else None
    if manifest is not None and manifest.get("model") == os.path.basename(path):
        raise UsageError(f"the reference '{path}' is a converted model (the conversion in '{folder}'), not the "
                         f"original", hint="pass the original model first: onnx-mrvl compare ORIGINAL.onnx OUT_DIR")


def _load_inputs(path: str, model_path: str):

    from ..feeds import check_feeds, read_inputs
    from ..inspection.canonical import load_model
    from ..quantize.calibration import input_specs

    m = load_model(model_path)
    specs = input_specs(m)
    feeds = read_inputs(path, [s[0] for s in specs])
    check_feeds(feeds, specs, f"'{path}'")   # float64, a wrong shape: our message, not onnxruntime's
    return feeds


def _int8_reference(path: str, exact: bool):
    """The reference: ``path``, or with ``--exact-int8`` its u8-re-coded copy (inspection/exact_int8.py).
    Without it, a note on stderr when onnxruntime's U8S8 kernels can saturate the reference here."""
    from ..inspection import exact_int8
    from ..inspection.canonical import load_model

    if exact:
        recoded = exact_int8.u8_recoded(load_model(path))[0]
        recoded.graph.name = f"{path} (int8 weights re-coded u8: exact sums)"   # the report's label
        return recoded
    note = exact_int8.saturation_note(load_model(path))
    if note:
        sys.stderr.write(note + "\n")
    return path


def run(args) -> int:
    from ..inspection.compare import compare_models

    a, b = _model_path(args.a), _model_path(args.b)
    _not_a_conversion(a)
    shapes = parse_input_shapes(args.input_shape)
    if shapes and args.inputs:
        raise UsageError("--input-shape and --inputs both give the input shapes",
                         hint="drop --input-shape: the arrays of --inputs have their shapes")
    feeds = _load_inputs(args.inputs, a) if args.inputs else None
    a = _int8_reference(a, args.exact_int8)
    result = compare_models(a, b, feeds, atol=args.atol, rtol=args.rtol, seed=args.seed,
                            simulate=not args.no_sim, fp16_baseline=args.fp16_baseline,
                            input_shapes=shapes)
    if args.json:
        print_json(result.to_dict())
    else:
        sys.stdout.write(result.to_text(limit=args.limit))
    if result.baseline is not None:
        return 0 if result.baseline.passed else 1
    return 0 if result.passed else 1

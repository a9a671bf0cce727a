"""``onnx-mrvl convert``: legalize, fuse, split, emit and compile a model."""
from __future__ import annotations

import os
import sys

from .. import file_weights
from .common import Progress, parse_input_shapes, parse_size, positive_int, print_json


def register(sub) -> None:
    p = sub.add_parser("convert", help="convert an ONNX model for the MLIP accelerator",
                       description="Legalize, fuse, split, emit and compile MODEL; write model.onnx, "
                                   "<region>-nodes.json, <region>-consts.json, <region>.bin, report.json and "
                                   "manifest.json as the folder OUT_DIR (one conversion per folder: a "
                                   "non-empty OUT_DIR needs --overwrite).")
    p.add_argument("model", help="the ONNX model")
    p.add_argument("-o", "--output", required=True, metavar="OUT_DIR", help="output folder")
    p.add_argument("--partition", choices=["max", "single", "cost"], default="max",
                   help="region strategy (default: max). max: every region with a conv/fc/recurrent layer; "
                        "cost: those the cost model finds faster on the accelerator; both merge regions no "
                        "path links (independent branches) into one call. single: one region fed by the inputs")
    p.add_argument("--exclude", action="append", default=[], metavar="NODE_OR_OP",
                   help="keep this node name or op type on the CPU (repeatable; a name that matches nothing "
                        "is an error listing close matches)")
    p.add_argument("--cut-after", action="append", default=[], metavar="NODE",
                   help="end an accelerator region after this node (repeatable; checked like --exclude)")
    p.add_argument("--force", action="store_true", help="keep regions without conv or fc")
    p.add_argument("--input-shape", action="append", metavar="NAME:D1,D2,...",
                   help="fix a symbolic input shape, e.g. x:1,3,224,224 (repeatable)")
    p.add_argument("--reference", action="store_true",
                   help="store each region's fp32 reference body (runs in plain onnxruntime)")
    p.add_argument("--embed", action="store_true", help="embed the binaries in model.onnx")
    p.add_argument("--fallback", action="store_true",
                   help="keep a region that fails to compile, or on an internal error the whole model, on the "
                        "CPU (a warning, recorded in report.json) instead of failing (exit 3 / 4)")
    p.add_argument("--num-tiles", type=positive_int, metavar="N", help="accelerator tiles, >= 1 (default 4)")
    p.add_argument("--ocm-size", type=parse_size, metavar="SIZE",
                   help="on-chip memory per tile: bytes (0x100000) or 512K, 1M, 1MiB (default 1M)")
    q = p.add_argument_group("quantization (onnxruntime's quantizer, then the int8 import; docs/quantize.md)")
    q.add_argument("--quantize", choices=["float16", "int8", "mixed"], default="float16",
                   help="float16 (default): fp16 layers; int8: quantize the float model on --calibration first "
                        "(QDQ, per-channel int8 weights, int8 activations) and run int8 layers; mixed: int8 where "
                        "the quantization noise stays within --snr-budget, fp16 elsewhere")
    q.add_argument("--calibration", metavar="DATA",
                   help="calibration inputs for --quantize int8/mixed, or for a dynamic-int8 model (quantize_dynamic; "
                        "no --quantize needed: its layers become int8 with calibrated activation scales): a .npz "
                        "(arrays named after the inputs; one sample, or samples stacked on a new leading axis), a "
                        ".npy (single-input models) or a folder of .npz/.npy files")
    q.add_argument("--calibration-method", choices=["minmax", "entropy", "percentile"], default="minmax",
                   help="how activation ranges are chosen from the calibration data (default minmax)")
    q.add_argument("--fp16-layer", action="append", default=[], metavar="NODE_OR_OP", dest="fp16_layers",
                   help="keep this node name or op type in fp16 when quantizing (repeatable)")
    q.add_argument("--quantize-option", action="append", default=[], metavar="KEY=VALUE", dest="quantize_options",
                   help="a recipe option (repeatable): equalize=true (cross-layer equalization), "
                        "activation_symmetric=true, moving_average=true, percentile=99.99, elementwise=false, "
                        "output_layers_fp16=true, bias_correction=true, weight_bits=7 (S8S8 reduce_range; default 8: U8U8); a dynamic-int8 model with --calibration: layer_outputs=int8, "
                        "recurrent=int8 (DynamicQuantizeLSTM as an int8 recurrent layer) "
                        "(docs/quantize.md)")
    q.add_argument("--snr-budget", type=float, default=30.0, metavar="DB",
                   help="--quantize mixed: the lowest signal-to-quantization-noise ratio (dB) a layer may have "
                        "and stay int8 (default 30)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT_DIR when it is not empty (only an earlier conversion's files: a folder "
                        "holding other files is refused)")
    p.add_argument("--no-consts-json", action="store_true",
                   help="do not write <region>-consts.json (the weights, as JSON: larger than the binary); "
                        "the binary stays the deployable artifact")
    p.add_argument("--stage", choices=["legalize", "fuse", "all"], default="all",
                   help="stop after this stage and write its model (OUT_DIR/<stage>.onnx)")
    p.add_argument("--dump-stages", action="store_true", help="also write stage-legalize.onnx and stage-fuse.onnx (and stage-quantize.onnx, the "
                                                           "QDQ model, with --quantize int8/mixed)")
    p.add_argument("--explain", action="store_true", help="print where every node runs, CPU nodes grouped by reason")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..model_checks import validate_model
    from ..modelio import load_model, make_folder, write_bytes_atomic

    from ..quantize.recipe import parse_cli

    progress = Progress()
    shapes = parse_input_shapes(args.input_shape)
    qopts = parse_cli(args.quantize_options) or None
    if args.stage != "all":
        from .. import shape_fit
        from ..fuse import fuse
        from ..legalize import legalize
        from ..options import check_input_shapes, check_node_names

        from ..quantize.dynamic_calibrated import quantize_or_calibrate

        model = load_model(args.model)
        validate_model(model)
        shapes = check_input_shapes(model, shapes)
        shape_fit.check_symbols(model, shapes)
        model = quantize_or_calibrate(model, quantize=args.quantize, calibration=args.calibration,
                                      calibration_method=args.calibration_method, fp16_layers=args.fp16_layers,
                                      snr_budget_db=args.snr_budget, input_shapes=shapes,
                                      quantize_options=qopts).model
        progress("legalize")
        legal = legalize(model, input_shapes=shapes)
        shape_fit.check_legalized(lambda: model, shapes, legal.report)
        out = legal.model
        check_node_names(args.exclude, args.cut_after, model, out)
        if args.stage == "fuse":
            progress("fuse")
            result = fuse(out, exclude=args.exclude)
            out = result.model
            if args.explain:
                for d in result.decisions.values():
                    print(f"{d.node:<32} {d.op_type:<20} {d.placement:<12} {d.reason}")
        make_folder(args.output, "-o OUT_DIR")
        path = os.path.join(args.output, f"{args.stage}.onnx")
        write_bytes_atomic(path, file_weights.serialized(out))
        if args.json:
            print_json({"stage": args.stage, "model": path})
        else:
            print(f"wrote {path}")
        return 0
    from ..artifact.folder import check_target
    from ..pipeline import convert

    check_target(args.output, overwrite=args.overwrite, protect=[args.model])   # before the work, not after
    result = convert(args.model, partition=args.partition, exclude=args.exclude, cut_after=args.cut_after,
                     force=args.force, input_shapes=shapes, reference=args.reference, embed=args.embed,
                     num_tiles=args.num_tiles, ocm_size=args.ocm_size, progress=progress, fallback=args.fallback,
                     quantize=args.quantize, calibration=args.calibration, calibration_method=args.calibration_method,
                     fp16_layers=args.fp16_layers, snr_budget_db=args.snr_budget, quantize_options=qopts)
    progress(f"writing {args.output}")
    path = result.save(args.output, stages=args.dump_stages, overwrite=args.overwrite,
                       consts_json=not args.no_consts_json, progress=progress)
    rep = result.report
    if args.json:
        print_json({"model": path, "regions": rep.regions, "offload_fraction": rep.offload_fraction,
                    "macs_total": rep.macs_total, "macs_offloaded": rep.macs_offloaded,
                    "cpu_nodes": len(rep.cpu_nodes()), "timings": result.timings,
                    **({"quantization": {k: v for k, v in rep.quantization.items() if k != "layers"}}
                       if rep.quantization else {})})
        return 0
    if args.explain:
        print(rep.explain())
    if rep.quantization:
        qi = rep.quantization
        print(f"quantized ({qi['mode']}, {qi['method']}, {qi['samples']} calibration samples): "
              f"{qi['int8_layers']}/{qi['layers_total']} layers int8, output SNR "
              + ", ".join(f"{k} {v} dB" for k, v in qi["output_snr_db"].items()))
    print(f"wrote {path}: {len(result.subgraphs)} region(s), {100 * rep.offload_fraction:.1f}% of MACs offloaded, "
          f"{len(rep.cpu_nodes())} node(s) on the CPU ({result.timings['total']:.2f}s)", file=sys.stdout)
    return 0

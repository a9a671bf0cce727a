"""``onnx-mrvl convert``: legalize, fuse, split, emit and compile a model."""
from __future__ import annotations

import os
import sys

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
                   help="region strategy (default: max)")
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
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT_DIR when it is not empty (only an earlier conversion's files: a folder "
                        "holding other files is refused)")
    p.add_argument("--no-consts-json", action="store_true",
                   help="do not write <region>-consts.json (the weights, as JSON: larger than the binary); "
                        "the binary stays the deployable artifact")
    p.add_argument("--stage", choices=["legalize", "fuse", "all"], default="all",
                   help="stop after this stage and write its model (OUT_DIR/<stage>.onnx)")
    p.add_argument("--dump-stages", action="store_true", help="also write stage-legalize.onnx and stage-fuse.onnx")
    p.add_argument("--explain", action="store_true", help="print where every node runs, CPU nodes grouped by reason")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..modelio import load_model, validate_model, write_bytes_atomic

    progress = Progress()
    shapes = parse_input_shapes(args.input_shape)
    if args.stage != "all":
        from ..fuse import fuse
        from ..legalize import legalize
        from ..options import check_node_names

        model = load_model(args.model)
        validate_model(model)
        progress("legalize")
        out = legalize(model, input_shapes=shapes).model
        check_node_names(args.exclude, args.cut_after, model, out)
        if args.stage == "fuse":
            progress("fuse")
            result = fuse(out, exclude=args.exclude)
            out = result.model
            if args.explain:
                for d in result.decisions.values():
                    print(f"{d.node:<32} {d.op_type:<20} {d.placement:<12} {d.reason}")
        os.makedirs(args.output, exist_ok=True)
        path = os.path.join(args.output, f"{args.stage}.onnx")
        write_bytes_atomic(path, out.SerializeToString())
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
                     num_tiles=args.num_tiles, ocm_size=args.ocm_size, progress=progress, fallback=args.fallback)
    progress(f"writing {args.output}")
    path = result.save(args.output, stages=args.dump_stages, overwrite=args.overwrite,
                       consts_json=not args.no_consts_json, progress=progress)
    rep = result.report
    if args.json:
        print_json({"model": path, "regions": rep.regions, "offload_fraction": rep.offload_fraction,
                    "macs_total": rep.macs_total, "macs_offloaded": rep.macs_offloaded,
                    "cpu_nodes": len(rep.cpu_nodes()), "timings": result.timings})
        return 0
    if args.explain:
        print(rep.explain())
    print(f"wrote {path}: {len(result.subgraphs)} region(s), {100 * rep.offload_fraction:.1f}% of MACs offloaded, "
          f"{len(rep.cpu_nodes())} node(s) on the CPU ({result.timings['total']:.2f}s)", file=sys.stdout)
    return 0

"""``onnx-mrvl sim``: run one model binary on the simulator (like Marvell's mlModel / mrvl-mlsim)."""
from __future__ import annotations

import logging
import os
import time

from ..errors import ArtifactError
from ..modelio import make_folder
from .common import print_json

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser(
        "sim", help="run a model binary (<region>.bin) on the fp16 simulator",
        description="Loads a model binary, runs it on the inputs (fp16 inside, float32 at the boundary), "
                    "writes each output as <prefix>-<i>.bin (raw float32) and <prefix>-<i>.npy, prints "
                    "each output's shape/min/max/mean and the simulated cycles. Inputs: .npy (one input), "
                    ".npz (by input name or arr_0.. in order) or .bin (raw float32 of all inputs in order).")
    p.add_argument("--model-binary", "-m", required=True, metavar="X.bin", help="the model binary")
    p.add_argument("--inputs", "-d", required=True, metavar="FILE", help="inputs: .npy, .npz or .bin")
    p.add_argument("-o", "--output-prefix", default=None, metavar="PREFIX",
                   help="write outputs to PREFIX-<i>.bin/.npy (default: sim-<binary's name without .bin> "
                        "beside the binary, e.g. sim-mrvl_region_0-0.npy)")
    p.add_argument("--perf-debug", action="store_true", help="print the per-layer performance table")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..sim import Simulator
    from ..sim.io import output_stats, read_inputs, write_outputs

    sim = Simulator(args.model_binary)
    inputs = read_inputs(args.inputs, sim.input_names, sim.input_shapes)
    prefix = args.output_prefix
    if prefix is None:   # sim-<binary name>-<i>: not a region file name, so a conversion folder stays whole
        base = str(args.model_binary)
        folder, name = os.path.split(base[:-4] if base.endswith(".bin") else base)
        prefix = os.path.join(folder, f"sim-{name}")
    make_folder(os.path.dirname(prefix), "-o PREFIX")      # before the run: a path mistake shows first
    log.info("running %s", args.model_binary)
    t0 = time.perf_counter()
    outputs = sim.run(inputs)
    wall = time.perf_counter() - t0
    try:
        paths = write_outputs(prefix, outputs)
    except OSError as exc:
        raise ArtifactError(f"cannot write the outputs '{prefix}-<i>.bin/.npy' ({exc.strerror or exc})",
                            hint="choose an -o PREFIX in a writable folder") from None
    stats = output_stats(sim.output_names, outputs)
    perf = sim.last_perf
    overflow = sim.last_overflow
    if args.json:
        doc = {"program": sim.name, "outputs": stats, "files": paths, "wall_s": wall,
               "perf": perf.to_dict() if args.perf_debug else {
                   k: v for k, v in perf.to_dict()["totals"].items()},
               "overflow": overflow}
        print_json(doc)
        return 0
    print(f"program {sim.name}: {len(outputs)} output(s), simulated in {wall * 1e3:.2f} ms wall")
    for i, s in enumerate(stats):
        extra = f"  non-finite={s['non_finite']}" if s["non_finite"] else ""
        print(f"  [{i}] {s['name']}: shape={s['shape']} min={s['min']:.6g} max={s['max']:.6g} "
              f"mean={s['mean']:.6g}{extra}")
    print(f"  written: {', '.join(paths)}")
    if overflow:
        print(f"  fp16 overflow first in {overflow['layer_name']} {overflow['name']} "
              f"(original nodes: {', '.join(overflow['origin']) or '-'})")
    if args.perf_debug:
        print(perf.table())
    else:
        print(f"  {perf.cycles:,} cycles, {perf.latency_s * 1e3:.4f} ms at "
              f"{float(perf.arch['clock_hz']) / 1e9:g} GHz, utilization {perf.utilization * 100:.1f}%")
    return 0

"""Model binary size against the budget "fp16 weight bytes + 1% + 64 KiB", and the emit/compile
round trip, on the example CNN and every model-zoo architecture.

For each model: ``convert()``, ``save()``, then re-compile every region from the saved JSON pair
alone (twice) and check the result equals the saved ``<region>.bin`` byte for byte. The budget
is checked per binary; "fp16 weight bytes" is the number of constant values in the region's
Constants-JSON x 2. "meta JSON" is the program's meta as canonical JSON, "stored" what the binary
holds of it (zlib-compressed since container format 1.1; format 1.0 stored the JSON as it is).

    .venv/bin/python benchmarks/bench_binary_size.py [name ...]     (names: fashion_mnist, zoo names)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import onnx_mrvl  # noqa: E402
from onnx_mrvl.artifact import canonical_json, load  # noqa: E402
from onnx_mrvl.artifact.format import HEADER, SECTION  # noqa: E402
from onnx_mrvl.emit import CompileOptions, compile_json  # noqa: E402
from onnx_mrvl.emit.json_attrs import to_number  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


def budget(fp16_bytes: int) -> int:
    return fp16_bytes + fp16_bytes // 100 + 64 * 1024


def const_values(consts: dict) -> int:
    return int(sum(np.prod([int(to_number(d)) for d in c["shape"]], dtype=np.int64) for c in consts.values()))


def measure(name: str, model: onnx.ModelProto) -> dict:
    t0 = time.perf_counter()
    result = onnx_mrvl.convert(model)
    t_convert = time.perf_counter() - t0
    rows = []
    with tempfile.TemporaryDirectory() as out:
        result.save(out)
        t_compile = 0.0
        for sg in result.subgraphs:
            with open(os.path.join(out, f"{sg.name}-nodes.json")) as f:
                nodes = json.load(f)
            with open(os.path.join(out, f"{sg.name}-consts.json")) as f:
                consts = json.load(f)
            with open(os.path.join(out, sg.artifact), "rb") as f:
                saved = f.read()
            t = time.perf_counter()
            again = [compile_json(nodes, consts, CompileOptions()) for _ in range(2)]
            t_compile += time.perf_counter() - t
            fp16 = 2 * const_values(consts)
            b = load(saved)
            rows.append({"region": sg.name, "bytes": len(saved), "fp16_weight_bytes": fp16, "budget": budget(fp16),
                         "identical": all(a == saved for a in again), "layers": len(b.meta["layers"]),
                         "format": "%d.%d" % b.version, "meta_json": len(canonical_json(b.meta)),
                         "meta_stored": SECTION.unpack_from(saved, HEADER.size)[3]})
    total = sum(r["bytes"] for r in rows)
    fp16 = sum(r["fp16_weight_bytes"] for r in rows)
    return {"model": name, "regions": len(rows), "bytes": total, "fp16_weight_bytes": fp16,
            "layers": sum(r["layers"] for r in rows), "format": rows[0]["format"] if rows else "-",
            "meta_json": sum(r["meta_json"] for r in rows), "meta_stored": sum(r["meta_stored"] for r in rows),
            "overhead_bytes": total - fp16, "worst_margin": min(r["budget"] - r["bytes"] for r in rows),
            "within_budget": all(r["bytes"] <= r["budget"] for r in rows),
            "round_trip_identical": all(r["identical"] for r in rows),
            "convert_s": round(t_convert, 2), "compile_x2_s": round(t_compile, 2)}


def main(argv=None) -> int:
    from onnx_mrvl.testing.randomize_weights import load_zoo, zoo_model_paths
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    names = args.names or ["fashion_mnist"] + list(zoo_model_paths())
    rows = []
    hdr = f"{'model':<14}{'regions':>8}{'layers':>7}{'binary bytes':>15}{'fp16 weights':>15}{'overhead':>11}" \
          f"{'meta JSON':>11}{'stored':>9}{'worst margin':>14}{'budget':>8}{'round trip':>11}{'convert s':>10}" \
          f"{'compile x2 s':>13}"
    print(hdr)
    for name in names:
        model = onnx.load(EXAMPLE) if name == "fashion_mnist" else load_zoo(name, 0)
        r = measure(name, model)
        rows.append(r)
        print(f"{r['model']:<14}{r['regions']:>8}{r['layers']:>7}{r['bytes']:>15,}{r['fp16_weight_bytes']:>15,}"
              f"{r['overhead_bytes']:>11,}{r['meta_json']:>11,}{r['meta_stored']:>9,}"
              f"{r['worst_margin']:>14,}{'ok' if r['within_budget'] else 'OVER':>8}"
              f"{'same' if r['round_trip_identical'] else 'DIFF':>11}{r['convert_s']:>10}{r['compile_x2_s']:>13}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    ok = all(r["within_budget"] and r["round_trip_identical"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``onnx-mrvl compile``: Nodes-JSON + Constants-JSON -> model binary (the backend compiler step)."""
from __future__ import annotations

import json
import logging
import os

from ..errors import CompileError, UsageError
from .common import parse_size, positive_int, print_json

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("compile", help="compile a Nodes-JSON + Constants-JSON pair into a model binary",
                       description="Reads only the JSON pair (ours or one TVM's Marvell integration wrote) "
                                   "and writes the model binary (docs/binary-format.md).")
    p.add_argument("--nodes", required=True, help="<name>-nodes.json")
    p.add_argument("--consts", required=True, help="<name>-consts.json")
    p.add_argument("-o", "--output", required=True, help="the model binary to write")
    p.add_argument("--num-tiles", type=positive_int, default=4, metavar="N", help="compute tiles, >= 1 (default 4)")
    p.add_argument("--ocm-size", type=parse_size, default=0x100000, metavar="SIZE",
                   help="on-chip memory per tile: bytes (0x100000) or 512K, 1M, 1MiB (default 1M)")
    p.add_argument("--quantize", default="float16", choices=["float16"], help="weight/activation precision")
    p.add_argument("--batch", type=positive_int, metavar="N", help="compile for batch N (input and reshape batch dims become N)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=run)


def _read_json(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except OSError as exc:
        raise CompileError(f"cannot read '{path}' ({exc.strerror})",
                           hint="pass the <region>-nodes.json / -consts.json that `onnx-mrvl convert` wrote") from None
    except ValueError as exc:
        raise CompileError(f"'{path}' is not valid JSON ({exc})",
                           hint="pass a complete Nodes-JSON / Constants-JSON file") from None


def check_pair(nodes: str, consts: str) -> None:
    """A JSON pair inside a ``convert`` output folder (one with ``manifest.json``) must belong to it
    (``artifact.manifest.check_folder``) and to the same region; a Constants-JSON the conversion
    skipped (``--no-consts-json``) is named as such."""
    from ..artifact.manifest import check_folder, is_region_file

    folders = {}
    for path in (nodes, consts):
        folders.setdefault(os.path.dirname(os.path.abspath(path)), []).append(os.path.basename(path))
    manifests = {folder: check_folder(folder, verify=names) for folder, names in folders.items()}
    manifest = manifests.get(os.path.dirname(os.path.abspath(consts)))
    name = os.path.basename(consts)
    if manifest and name in (manifest.get("skipped") or {}) and not os.path.exists(consts):
        raise UsageError(f"'{consts}' was not written: its conversion skipped it ({manifest['skipped'][name]})",
                         hint=f"re-run onnx-mrvl convert without --no-consts-json, or deploy the region binary "
                              f"{name[:-len('-consts.json')]}.bin, which holds the weights")
    a, b = os.path.basename(nodes), name
    if (len(folders) == 1 and manifest and is_region_file(a) and is_region_file(b) and a.endswith("-nodes.json")
            and b.endswith("-consts.json") and a[:-len("-nodes.json")] != b[:-len("-consts.json")]):
        raise UsageError(f"--nodes '{a}' and --consts '{b}' belong to different regions",
                         hint="pass the -nodes.json and -consts.json of one region")


def run(args) -> int:
    from ..artifact import pack, sha256_hex
    from ..emit import CompileOptions, build_program
    from ..modelio import write_bytes_atomic

    options = CompileOptions(num_tiles=args.num_tiles, ocm_size=args.ocm_size, quantize=args.quantize,
                             batch=args.batch)
    check_pair(args.nodes, args.consts)
    log.info("compiling %s + %s", args.nodes, args.consts)
    meta, weights = build_program(_read_json(args.nodes), _read_json(args.consts), options)
    data = pack(meta, weights)
    write_bytes_atomic(args.output, data)
    plan = meta["memory_plan"]
    summary = {"output": args.output, "bytes": len(data), "sha256": sha256_hex(data), "layers": len(meta["layers"]),
               "batch_size": meta["batch_size"], "weight_bytes": int(sum(w.nbytes for w in weights.values())),
               "dram_bytes": int(sum(layer["dram_bytes"] for layer in meta["layers"])),
               "resident_tensors": len(plan["resident"]), "streamed_tensors": len(plan["streamed"])}
    if args.json:
        print_json(summary)
        return 0
    print(f"wrote {args.output}: {summary['layers']} layers, batch {summary['batch_size']}, {summary['bytes']:,} bytes, "
          f"{summary['resident_tensors']} tensors in OCM / {summary['streamed_tensors']} in DRAM, "
          f"{summary['dram_bytes']:,} DRAM bytes per inference, sha256 {summary['sha256'][:16]}")
    return 0

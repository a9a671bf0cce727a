"""``ConvertResult.save()``: the files of one conversion, written as one folder (``artifact/folder.py``)
with its ``manifest.json`` (``artifact/manifest.py``), and progress per region on large saves."""
from __future__ import annotations

import logging
import os
from typing import Callable, Dict, List, Optional, Tuple

from . import file_weights
from .artifact import direct_io
from .artifact.folder import Writer, write_folder
from .artifact.manifest import build
from .gcpause import gc_paused
from .modelio import as_path, dump_json
from .stamp import converter_info

log = logging.getLogger(__name__)
SLICE = 64 << 20          # bytes of a region binary handed to the file at a time
SKIPPED_CONSTS = "consts_json=False (--no-consts-json): the region binary holds the weights"


def _json(obj, direct: bool = False) -> Writer:
    """``obj`` as a JSON file; ``direct``: a large one, written past the page cache (artifact/direct_io.py)."""
    def write(f):
        dump_json(obj, f)
    write.direct = direct
    return write


def _bytes(data: bytes, sha256: Optional[str] = None) -> Writer:
    """``data`` as a file; ``sha256``: its digest when known (the manifest then takes it). The
    write releases the GIL throughout (``gil_free``): the folder writes it beside the others."""
    def write(f):
        view = memoryview(data)
        for i in range(0, len(view), SLICE):   # slices: the disk starts on the first while the rest is copied
            f.write(view[i:i + SLICE])
        return len(view)
    write.sha256 = sha256
    write.gil_free = True
    write.direct = len(data) >= direct_io.MIN_SIZE
    return write


def _model(model) -> Writer:
    """Serialized when written: one model's bytes in memory at a time, none before the target is checked."""
    return lambda f: f.write(file_weights.serialized(model))


def _announced(message: str, say: Callable[[str], None], write: Writer) -> Writer:
    def run(f):
        say(message)
        return write(f)
    return run


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


def save_result(result, out_dir: str, *, stages: bool = False, overwrite: bool = False, consts_json: bool = True,
                progress: Optional[Callable[[str], None]] = None) -> str:
    """Write ``result`` (a ``ConvertResult``) into ``out_dir``; returns the path of its model.onnx.
    ``progress(message)`` gets "writing region i of N" when a region's first file starts and "wrote
    region i of N" when its binary is done (default: INFO records of this module's logger); a binary is
    written beside the next region's files, so region i+1 may be announced before region i is done."""
    out_dir = as_path(out_dir, "save()'s output folder", "a folder path (str or os.PathLike)")
    say = progress or log.info
    files: List[Tuple[str, Writer]] = []
    region_of: Dict[str, str] = {}
    skipped: Dict[str, str] = {}
    for i, sg in enumerate(result.subgraphs):
        files.append((f"{sg.name}-nodes.json", _announced(f"writing region {i + 1} of {len(result.subgraphs)}: "
                                                          f"{sg.name}", say, _json(sg.nodes_json))))
        if consts_json:
            # base64 of the weights: larger than the binary's (fp16 / int8) copy of them
            files.append((f"{sg.name}-consts.json", _json(sg.consts_json, len(sg.binary) * 2 >= direct_io.MIN_SIZE)))
        else:
            skipped[f"{sg.name}-consts.json"] = SKIPPED_CONSTS
        files.append((sg.artifact, _bytes(sg.binary, sg.binary_sha256())))
        region_of.update({name: sg.name for name, _ in files[-3 if consts_json else -2:]})
    if stages:
        files.extend((f"stage-{name}.onnx", _model(m)) for name, m in result.stages.items())
    files.append(("report.json", _json(result.report.to_dict())))
    files.append(("model.onnx", _model(result.model)))

    provenance = getattr(result.report, "provenance", None) or {}
    source = provenance.get("source") or {}
    done: Dict[str, List[str]] = {}
    count = len(result.subgraphs)

    def on_file(name: str, size: int, seconds: float) -> None:
        region = region_of.get(name)
        if region is None:
            if size >= 10_000_000:
                say(f"wrote {name} ({_mb(size)}, {seconds:.1f}s)")
            return
        parts = done.setdefault(region, [])
        parts.append(f"{name[len(region):].lstrip('-.')} {_mb(size)}")
        if name.endswith(".bin"):
            say(f"wrote region {len(done)} of {count}: {region} ({', '.join(parts)})")

    def manifest(digests: Dict[str, dict]) -> dict:
        return build(digests, model="model.onnx", converter=provenance.get("converter") or converter_info(),
                     source=source, skipped=skipped)

    with gc_paused():   # the report and JSON documents of a large graph: see gcpause.py
        write_folder(out_dir, files, manifest=manifest, overwrite=overwrite, protect=[source.get("path")],
                     on_file=on_file)
    return os.path.join(out_dir, "model.onnx")

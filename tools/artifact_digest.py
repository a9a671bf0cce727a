#!/usr/bin/env python3
"""sha256 of every file ``convert()`` + ``save()`` writes, for a fixed list of models: a refactor or an
optimisation that must not change the output checks it with ``--check``.

    python tools/artifact_digest.py [--out FILE] [--check FILE] [--only SUBSTR ...] [--no-zoo]

Models: the project models (``models.all_models``), the onnx-wheel zoo architectures with seeded
weights (``randomize_weights.load_zoo``), the exporter-style architectures of ``onnx_mrvl/testing/arch_*.py``,
control-flow and recurrent models, a synthetic branchy chain, and a few option variants
(partition="single"/"cost", reference=True, embed=True, consts_json=False). Each model is given to
``convert`` as a ModelProto (no temporary path enters the provenance), so every saved file, including
model.onnx, report.json and manifest.json, is deterministic. A case whose conversion raises records
the error's type and message instead of digests (a changed error is a difference too).

``--out FILE`` writes ``{case: {file: sha256}}`` as JSON (also printed as lines ``case file sha256``);
``--check FILE`` compares with an earlier ``--out`` file and exits 1 on any difference (a case only
one side has is reported but is a difference only when ``--only``/``--no-zoo`` did not leave it out).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path and os.path.isdir(os.path.join(ROOT, "onnx_mrvl")):
    sys.path.insert(0, ROOT)

Case = Tuple[str, Callable[[], object], dict, dict]   # name, builder, convert kwargs, save kwargs


def cases(zoo: bool = True) -> List[Case]:
    """The fixed list of (name, builder, convert kwargs, save kwargs)."""
    from onnx_mrvl.testing import arch_attention
    from onnx_mrvl.testing import arch_detect_classify
    from onnx_mrvl.testing import arch_ocr_audio
    from onnx_mrvl.testing import arch_speech
    from onnx_mrvl.testing import arch_transformer
    from onnx_mrvl.testing import control_flow_models as cf
    from onnx_mrvl.testing import randomize_weights as rw
    from onnx_mrvl.testing import recurrent_models as rec
    from onnx_mrvl.testing.models import all_models, branchy_chain, resnet18_like, tiny_cnn
    out: List[Case] = []
    for name, build in all_models().items():
        out.append((name, lambda b=build: b(seed=0), {}, {}))
    if zoo:
        for name in rw.zoo_model_paths():
            out.append((f"zoo/{name}", lambda n=name: rw.load_zoo(n, 0), {}, {}))
    groups = (("detect", arch_detect_classify.ALL), ("ocr_audio", arch_ocr_audio.all_models()),
              ("speech", arch_speech.all_models()), ("transformer", arch_transformer.all_models()),
              ("attention", arch_attention.all_models()))
    for group, builders in groups:
        for name, build in builders.items():
            out.append((f"{group}/{name}", build, {}, {}))
    for name in ("if_convs", "loop_conv", "vad_like", "vad_branches", "loop_reads_feature_map"):
        out.append((f"control_flow/{name}", getattr(cf, name), {}, {}))
    for name in ("crnn_batch2_layout1", "conv_gru_last", "crnn_unrolled", "conv_gru_hidden", "stacked_bilstm",
                 "streaming_cell", "keras_lstm_tf2onnx", "unrolled_gru"):
        out.append((f"recurrent/{name}", getattr(rec, name), {}, {}))
    out.append(("recurrent/cell_lstm_bidirectional", lambda: rec.cell_model("LSTM", direction="bidirectional"),
                {}, {}))
    out.append(("synthetic/branchy_1000", lambda: branchy_chain(1000, branchy=True), {}, {}))
    out.append(("synthetic/chain_600", lambda: branchy_chain(600), {}, {}))
    r18 = lambda: resnet18_like(seed=0)  # noqa: E731
    out += [("options/resnet18_single", r18, {"partition": "single"}, {}),
            ("options/resnet18_cost", r18, {"partition": "cost"}, {}),
            ("options/resnet18_reference", r18, {"reference": True}, {}),
            ("options/resnet18_embed", r18, {"embed": True}, {}),
            ("options/resnet18_no_consts_json", r18, {}, {"consts_json": False}),
            ("options/resnet18_stages", r18, {}, {"stages": True}),
            ("options/tiny_cnn_batch4", lambda: tiny_cnn(batch=4), {}, {}),
            ("options/resnet18_exclude_cut", r18, {"exclude": ["MaxPool"], "cut_after": []}, {})]
    return out


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def save_models(selected: Sequence[Case], folder: str) -> None:
    """Build each case's model into ``folder`` (``manifest.json`` + one .onnx a case), so another
    checkout of onnx_mrvl can convert the very same models (``--models``)."""
    import onnx
    os.makedirs(folder, exist_ok=True)
    manifest = []
    for i, (name, build, convert_kw, save_kw) in enumerate(selected):
        file = f"{i:03d}.onnx"
        onnx.save(build(), os.path.join(folder, file))
        manifest.append({"name": name, "file": file, "convert": convert_kw, "save": save_kw})
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def saved_cases(folder: str, paths: bool = False) -> List[Case]:
    """The cases of a ``save_models`` folder: the saved models, loaded as ModelProtos (``paths``:
    given to ``convert`` as the paths of their files, which the saved files then name)."""
    import onnx
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    return [(c["name"], lambda p=os.path.join(folder, c["file"]): p if paths else onnx.load(p), c["convert"],
             c["save"]) for c in manifest]


def digest_case(build, convert_kw: dict, save_kw: dict) -> Dict[str, str]:
    """{saved file name: sha256} of one conversion, or {"<error>": "Type: message"}."""
    import onnx_mrvl
    try:
        model = build()
        result = onnx_mrvl.convert(model, **convert_kw)
        with tempfile.TemporaryDirectory(prefix="artifact-digest-") as tmp:
            out = os.path.join(tmp, "out")
            result.save(out, **save_kw)
            return {name: _sha256(os.path.join(out, name)) for name in sorted(os.listdir(out))}
    except Exception as exc:  # noqa: BLE001 - a changed failure is a difference to report
        return {"<error>": f"{type(exc).__name__}: {exc}"}


def run(selected: Sequence[Case], say=print) -> Dict[str, Dict[str, str]]:
    out = {}
    for name, build, convert_kw, save_kw in selected:
        t = time.perf_counter()
        out[name] = digest_case(build, convert_kw, save_kw)
        say(f"{name}: {len(out[name])} files, {time.perf_counter() - t:.1f} s"
            + (f" ({out[name]['<error>'][:100]})" if "<error>" in out[name] else ""))
    return out


def compare(before: Dict[str, Dict[str, str]], after: Dict[str, Dict[str, str]]) -> List[str]:
    """Human-readable differences between two digest maps over the cases ``after`` holds."""
    diffs = []
    for case in sorted(after):
        if case not in before:
            diffs.append(f"{case}: not in the reference file")
            continue
        a, b = before[case], after[case]
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                diffs.append(f"{case}: {name}: {a.get(name, '(missing)')} -> {b.get(name, '(missing)')}")
    return diffs


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the digests as JSON to FILE")
    ap.add_argument("--check", help="compare with a JSON file written by --out; exit 1 on a difference")
    ap.add_argument("--only", nargs="+", default=(), help="cases whose name contains one of these strings")
    ap.add_argument("--no-zoo", action="store_true", help="leave out the onnx-wheel zoo models")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    ap.add_argument("--save-models", metavar="DIR", help="build the selected models into DIR and exit")
    ap.add_argument("--models", metavar="DIR", help="convert the models saved in DIR by --save-models "
                    "instead of building them (the same models for two checkouts of onnx_mrvl)")
    ap.add_argument("--paths", action="store_true", help="with --models: convert each model from the path of "
                    "its file (modelio's file reading; ONNX_MRVL_FILE_WEIGHTS_MIN=0: file_weights.py at any size)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    every = saved_cases(args.models, args.paths) if args.models else cases(zoo=not args.no_zoo)
    selected = [c for c in every if (not args.only or any(s in c[0] for s in args.only))
                and not (args.no_zoo and c[0].startswith("zoo/"))]
    if args.save_models:
        save_models(selected, args.save_models)
        return 0
    if args.list:
        print("\n".join(c[0] for c in selected))
        return 0
    digests = run(selected, say=lambda m: print(m, file=sys.stderr, flush=True))
    for case, files in digests.items():
        for name, sha in files.items():
            print(f"{case} {name} {sha}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.check:
        with open(args.check) as f:
            before = json.load(f)
        diffs = compare(before, digests)
        for d in diffs:
            print(f"DIFFERENT {d}", file=sys.stderr)
        print(f"{len(digests)} cases checked against {args.check}: "
              f"{'identical' if not diffs else f'{len(diffs)} differences'}", file=sys.stderr)
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

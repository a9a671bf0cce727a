"""Survey of user mistakes on real models (session 17): convert each model with its input shapes
made wrong in one way and print one JSON line per case: ``ok`` (regions), ``err`` (our error's class
and message) or ``RAW`` (any other exception: a bug to fix). Measured with it: docs/surveys/user-errors.md.

    python tools/survey_user_errors.py LIST KIND [KIND ...]

LIST: a file of .onnx paths, one a line. A symbolic dimension takes the size of the model's
``<stem>_feeds.npz`` array when one lies beside the model (or one folder up), else 1 for the first
axis and 64 for the others. KIND: ``rank`` (one axis more), ``zero`` / ``neg`` / ``float`` (the last
axis 0 / -3 / 2.5), ``name`` (an input that does not exist), ``init`` (an initializer's name),
``static`` (a static axis + 1), ``small`` / ``small3`` (every symbolic axis but the first 1 / 3),
``batch2`` (a symbolic first axis 2), ``good``. Not run by the tests.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import sys
import warnings

import numpy as np
import onnx

import onnx_mrvl
from onnx_mrvl.errors import MrvlError


def shapes_for(path: str):
    """(shapes, symbolic axes per input, initializer names) of the model at ``path``."""
    m = onnx.load(path, load_external_data=False)
    inits = [t.name for t in m.graph.initializer]
    stem, folder = os.path.basename(path).split("_")[0], os.path.dirname(path)
    found = glob.glob(os.path.join(folder, stem + "_feeds.npz")) + \
        glob.glob(os.path.join(os.path.dirname(folder), stem + "_feeds.npz"))
    feeds = dict(np.load(found[0])) if found else {}
    good, dyn = {}, {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        good[vi.name] = list(feeds[vi.name].shape) if vi.name in feeds else \
            [d.dim_value if d.dim_value > 0 else (1 if i == 0 else 64) for i, d in enumerate(dims)]
        dyn[vi.name] = [i for i, d in enumerate(dims) if not d.dim_value > 0]
    return good, dyn, inits


def mistake(kind: str, good, dyn, inits):
    """The input shapes of mistake ``kind``, or None when the model has nothing to get wrong so."""
    s = {k: list(v) for k, v in good.items()}
    first = next(iter(s))
    static = [(k, i) for k in s for i in range(len(s[k])) if i not in dyn[k]]
    if kind == "rank":
        s[first] = s[first] + [1]
    elif kind in ("zero", "neg", "float"):
        if not s[first]:
            return None
        s[first][-1] = {"zero": 0, "neg": -3, "float": 2.5}[kind]
    elif kind == "name":
        s["no_such_input"] = [1]
    elif kind == "init":
        if not inits:
            return None
        s[inits[0]] = [1]
    elif kind == "static":
        if not static:
            return None
        k, i = static[-1]
        s[k][i] += 1
    elif kind in ("small", "small3"):
        if not any(i > 0 for v in dyn.values() for i in v):
            return None
        for k in s:
            for i in dyn[k]:
                s[k][i] = 1 if kind == "small" and i > 0 else 3 if i > 0 else s[k][i]
    elif kind == "batch2":
        if not any(0 in v for v in dyn.values()):
            return None
        for k in s:
            if 0 in dyn[k]:
                s[k][0] = 2
    elif kind != "good":
        raise SystemExit(f"unknown kind {kind!r}")
    return s


def main(argv) -> int:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    paths = open(argv[0]).read().split()
    for kind in argv[1:]:
        for path in paths:
            s = mistake(kind, *shapes_for(path))
            row = {"model": path, "kind": kind, "shapes": s}
            if s is None:
                row["skip"] = True
            else:
                try:
                    row["ok"] = len(onnx_mrvl.convert(path, input_shapes=s or None).subgraphs)
                except MrvlError as e:
                    row.update(err=type(e).__name__, msg=str(e)[:300])
                except Exception as e:  # noqa: BLE001 - what the survey looks for
                    row.update(RAW=type(e).__name__, msg=str(e)[:300])
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

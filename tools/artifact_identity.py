#!/usr/bin/env python3
"""Are the converted artifacts of two revisions byte-identical? (a refactor must not change them)

    python tools/artifact_identity.py BEFORE AFTER [--no-zoo] [--only SUBSTR ...] [--keep DIR] [--paths]

BEFORE and AFTER are git revisions of this repository, or ``.`` for the working tree. The models
are built once, by this checkout's builders (``tools/artifact_digest.py --save-models``), so both
revisions convert the very same ModelProtos even where the builders moved or changed since; each
revision's own ``onnx_mrvl`` (a ``git archive`` of it) converts and saves them
(``artifact_digest.py --models``; ``--paths``: from the paths of the model files, which model.onnx,
report.json and manifest.json then name, the same for both), and the sha256 of every saved file is
compared. Exit 0 when
identical, 1 on a difference (each printed), 2 when a revision cannot be run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _checkout(rev: str, dest: str) -> str:
    """``onnx_mrvl`` of ``rev`` under ``dest`` (``.``: this working tree, used in place)."""
    if rev == ".":
        return ROOT
    os.makedirs(dest)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "onnx_mrvl"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    return dest


def _digest(src: str, script: str, models: str, extra: List[str]) -> int:
    env = dict(os.environ, PYTHONPATH=src)
    return subprocess.run([sys.executable, script, "--models", models, *extra], env=env,
                          stdout=subprocess.DEVNULL).returncode


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="git revision (or . for the working tree)")
    ap.add_argument("after", help="git revision (or . for the working tree)")
    ap.add_argument("--no-zoo", action="store_true", help="leave out the onnx-wheel zoo models")
    ap.add_argument("--only", nargs="+", default=(), help="cases whose name contains one of these strings")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (models, digests)")
    ap.add_argument("--paths", action="store_true", help="convert each model from its file's path "
                    "(artifact_digest.py --paths: the files name it, the same for both revisions)")
    args = ap.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="artifact-identity-")
    try:
        # a copy of the digest script outside any checkout: it imports the onnx_mrvl of PYTHONPATH
        script = os.path.join(work, "digest", "artifact_digest.py")
        os.makedirs(os.path.dirname(script), exist_ok=True)
        shutil.copy(os.path.join(HERE, "artifact_digest.py"), script)
        models = os.path.join(work, "models")
        select = (["--no-zoo"] if args.no_zoo else []) + (["--only", *args.only] if args.only else [])
        subprocess.run([sys.executable, os.path.join(HERE, "artifact_digest.py"), "--save-models", models, *select],
                       check=True)
        ref = os.path.join(work, "before.json")
        before = _checkout(args.before, os.path.join(work, "before"))
        paths = ["--paths"] if args.paths else []
        if _digest(before, script, models, ["--out", ref, *paths]) != 0:
            print(f"{args.before}: the digest run failed", file=sys.stderr)
            return 2
        after = _checkout(args.after, os.path.join(work, "after"))
        rc = _digest(after, script, models, ["--out", os.path.join(work, "after.json"), "--check", ref, *paths])
        print(f"{args.before} -> {args.after}: {'identical' if rc == 0 else 'DIFFERENT'}")
        return 0 if rc == 0 else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

"""Region failures carried through onnxruntime as a failed run, on any thread.

A Python exception must not leave an onnxruntime-extensions custom op: the library turns it into a
C++ exception inside a ``noexcept`` entry point and the process aborts (measured with 0.15.2). So a
failing region records its error here under a fresh *token* and hands back an empty tensor of
shape ``[0, token]``. The runtime form of the model (``runtime_form.py``) follows every region
output with a ``Reshape`` to the static shape the binary was compiled for (the *guard*); it cannot
reshape zero elements, so onnxruntime itself fails the run, on whichever thread ran the node, and
its message quotes the input shape, i.e. the token. ``translate`` maps that message back to the
recorded error. Tokens are random 13+ digit numbers, so concurrent runs never take each other's
error; unclaimed records (a run whose error was never translated) are evicted oldest first.
"""
from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from typing import Optional

from ..errors import MrvlError, MrvlRuntimeError

GUARD_SUFFIX = "/mrvl_guard"
_TOKEN_BASE = 10 ** 12          # tokens have 13 or more digits: never a real dimension of a region
_KEEP = 4096
_lock = threading.Lock()
_records: "OrderedDict[int, MrvlError]" = OrderedDict()
_TOKEN_RE = re.compile(r"(?<!\d)\d{13,19}(?!\d)")
_GUARD_RE = re.compile(r"Name:'([^']*?)" + re.escape(GUARD_SUFFIX))
_NODE_RE = re.compile(r"while running (\S+) node\. Name:'([^']*)' Status Message: (.*)", re.S)


def record(err: MrvlError) -> int:
    """Keep ``err`` and return the token the failed output's shape carries."""
    token = _TOKEN_BASE + secrets.randbelow(8 * _TOKEN_BASE)
    with _lock:
        _records[token] = err
        while len(_records) > _KEEP:
            _records.popitem(last=False)
    return token


def take(text: str) -> Optional[MrvlError]:
    """The recorded error whose token appears in ``text`` (and forget it)."""
    with _lock:
        for m in _TOKEN_RE.finditer(text):
            err = _records.pop(int(m.group()), None)
            if err is not None:
                return err
    return None


def translate(exc: BaseException) -> Optional[MrvlError]:
    """Our error for an onnxruntime failure caused by a region (None: not a region failure)."""
    text = str(exc)
    err = take(text)
    if err is not None:
        return err
    m = _GUARD_RE.search(text)
    if m is not None:   # a guard failed but its record is gone (evicted): still our failure
        region = m.group(1)
        return MrvlRuntimeError(f"region '{region}' failed; its details were not kept ({text.strip()})",
                                node=region, hint="see the log of this process for the region's error")
    return None


def cpu_node_failure(exc: BaseException, nodes) -> Optional[MrvlError]:
    """Our error for onnxruntime failing a CPU node of the model (one of ``nodes``, by name) on the
    inputs given: an index past an embedding table, a size a reflect pad or a window cannot take.
    None for anything else (a node the runtime form added stays onnxruntime's error: ours to fix)."""
    m = _NODE_RE.search(str(exc))
    if m is None or m.group(2) not in nodes:
        return None
    op, name, why = m.group(1), m.group(2), m.group(3).strip()
    return MrvlRuntimeError(f"onnxruntime failed running node '{name}' ({op}, on the CPU) on these inputs: {why}",
                            node=name, hint="give inputs the model takes at this node (onnxruntime fails the original "
                                            "model the same way; if that one runs them, please report it)")

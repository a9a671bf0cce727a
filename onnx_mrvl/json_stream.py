"""``dump_json``: the bytes of ``json.dumps(obj, indent=1) + "\\n"``, streamed to a binary file.

``json.dumps`` with an indent runs the pure-Python encoder, one generator step per token: seconds on
the Nodes-JSON of a 10,000-layer region. This writer produces the same bytes from one recursive
function that appends finished strings to a list (json's own C string escaper, ``int.__repr__`` and
json's float spelling), written out in chunks of about 1 MiB. Long strings that need no escaping
(base64 constants) are written in slices of ``STRING_CHUNK`` characters, each checked as it is
written, so neither the document nor a bytes copy of a 400 MB string is ever held in memory. A value
with ``json_string_chunks()`` (slices of ASCII bytes that need no escaping, ``bytes`` or read-only
memoryviews: a Constants-JSON text not made yet, emit/const_entry.py) is written as the string they join to, and a dict with
``json_items()`` is walked through it: the whole text of such a constant is never made.
"""
from __future__ import annotations

from json.encoder import encode_basestring_ascii as _escape
from typing import BinaryIO, List

LONG_STRING = 1 << 16    # strings at least this long are written in checked slices, not escaped whole
STRING_CHUNK = 1 << 22   # ... of this many characters
FLUSH_PARTS = 4096       # pending pieces written out together (each piece is short: see _Writer.string)
SHORT = 1024             # longer strings are written on their own
_INF = float("inf")
_VERBATIM = bytes(range(0x20, 0x7F)).replace(b'"', b"").replace(b"\\", b"")  # json writes these as they are


def dump_json(obj, f: BinaryIO) -> None:
    """Write exactly the bytes of ``(json.dumps(obj, indent=1) + "\\n").encode()`` to binary file ``f``."""
    w = _Writer(f)
    w.value(obj, 0)
    w.parts.append("\n")
    w.flush()


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == _INF:
        return "Infinity"
    if o == -_INF:
        return "-Infinity"
    return float.__repr__(o)


def _key(key) -> str:
    """json's spelling of a dict key (quoted), in json's order of type checks."""
    if isinstance(key, str):
        return _escape(key)
    if isinstance(key, float):
        return _escape(_float(key))
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return '"' + int.__repr__(key) + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


class _Writer:
    def __init__(self, f: BinaryIO):
        self.f = f
        self.parts: List[str] = []

    def flush(self) -> None:
        if self.parts:
            self.f.write("".join(self.parts).encode("ascii"))
            self.parts.clear()

    def value(self, o, level: int) -> None:
        """Append ``o`` as json.dumps(indent=1) writes it at nesting ``level`` (json's type checks, in its order)."""
        parts = self.parts
        if isinstance(o, str):
            self.string(o)
        elif o is None:
            parts.append("null")
        elif o is True:
            parts.append("true")
        elif o is False:
            parts.append("false")
        elif isinstance(o, int):
            parts.append(int.__repr__(o))
        elif isinstance(o, float):
            parts.append(_float(o))
        elif isinstance(o, (list, tuple)):
            self.array(o, level)
        elif isinstance(o, dict):
            self.mapping(o, level)
        elif hasattr(type(o), "json_string_chunks"):   # a long ASCII text made in slices (emit/const_entry.py)
            self.chunked_string(o.json_string_chunks())
        else:
            raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
        if len(parts) >= FLUSH_PARTS:
            self.flush()

    def array(self, o, level: int) -> None:
        parts = self.parts
        if not o:
            parts.append("[]")
            return
        inner = "\n" + " " * (level + 1)
        if all(type(x) is str and len(x) < SHORT for x in o):   # the common leaf: a list of short strings
            parts.append("[" + inner + ("," + inner).join(map(_escape, o)) + "\n" + " " * level + "]")
            return
        sep = "[" + inner
        for x in o:
            parts.append(sep)
            sep = "," + inner
            self.value(x, level + 1)
        parts.append("\n" + " " * level + "]")

    def mapping(self, o: dict, level: int) -> None:
        parts = self.parts
        if not o:
            parts.append("{}")
            return
        inner = "\n" + " " * (level + 1)
        sep = "{" + inner
        for k, v in (o.json_items() if hasattr(type(o), "json_items") else o.items()):
            parts.append(sep + _key(k) + ": ")
            sep = "," + inner
            self.value(v, level + 1)
        parts.append("\n" + " " * level + "}")

    def string(self, s: str) -> None:
        if len(s) < SHORT:
            self.parts.append(_escape(s))
            return
        self.flush()
        if len(s) < LONG_STRING or not s.isascii():
            self.f.write(_escape(s).encode("ascii"))
            return
        self.f.write(b'"')
        for i in range(0, len(s), STRING_CHUNK):
            data = s[i:i + STRING_CHUNK].encode("ascii")
            if data.translate(None, _VERBATIM):   # a character json escapes: json's encoding of the rest
                self.f.write(_escape(s[i:])[1:-1].encode("ascii"))
                break
            self.f.write(data)
        self.f.write(b'"')

    def chunked_string(self, chunks) -> None:
        """A string given in slices of ASCII bytes (``bytes`` or a bytes-like buffer) that need no
        escaping (base64: its producer guarantees the alphabet, so they are not checked), written as
        ``string`` writes the whole; large slices are handed to the file as they are."""
        parts = self.parts
        parts.append('"')
        for piece in chunks:
            if len(piece) < SHORT:   # a small constant: with the other pending pieces
                parts.append(str(piece, "ascii"))
            else:
                self.flush()
                self.f.write(piece)
        parts.append('"')

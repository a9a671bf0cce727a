"""``ConstEntry``: one Constants-JSON entry, a dict to every reader, whose ``data_base64`` text is
made from its read-only array when it is read, not when it is emitted.

The base64 text of the weights is a third bigger than the weights and was held, with a second copy
while ``bytes.decode`` made the str, for every region from emit to save: the largest part of
``convert``'s peak memory on a large model (docs/benchmarks.md). An entry made by
``attach_lazy(array)`` keeps the array instead; ``entry["data_base64"]`` (and ``get``, ``items``,
``values``, ``copy``, ``==``, ``dict(entry)``, ``json.dumps``, pickling) gives the same text as before,
built on that read and then kept; ``json_stream.dump_json`` writes it in slices (``json_items``) so
save never holds the whole text either. Writing ``entry["data_base64"] = text`` replaces it as for any
dict (the array is then no longer the entry's bytes: ``known_bytes`` returns None).
"""
from __future__ import annotations

from typing import Iterator, Optional, Union

import numpy as np

from .. import blocks
from . import base64_native

B64_KEY = "data_base64"
CHUNK = 3 << 20          # bytes encoded per slice (a multiple of 3: the slices' text joins to the whole's)


class Base64Text:
    """The base64 text of a read-only array, in slices of ASCII bytes (``json_string_chunks``) or
    whole (``text()``)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def json_string_chunks(self) -> Iterator[Union[bytes, memoryview]]:
        """The text as ASCII bytes, in slices (base64 needs no JSON escaping): ``bytes``, or a
        read-only memoryview of a new buffer nothing writes again (emit/base64_native.py)."""
        raw = self._raw()

        def buffer(i: int) -> np.ndarray:   # made on this thread: freed memory is reused as before
            return np.empty(base64_native.encoded_size(min(CHUNK, raw.size - i)), np.uint8)

        def encode(i: int, out: np.ndarray) -> memoryview:
            n = base64_native.encode_into(raw[i:i + CHUNK], out)
            return memoryview(out[:n]).toreadonly()

        if raw.size <= CHUNK:   # one slice: nothing to overlap (a pool hand-off costs more for small constants)
            if raw.size:
                yield encode(0, buffer(0))
            return
        # the next slice is encoded on the second core while the caller writes this one
        ahead = blocks.background(encode, 0, buffer(0))
        for i in range(0, raw.size, CHUNK):
            j = i + CHUNK
            piece, ahead = ahead.result(), (blocks.background(encode, j, buffer(j)) if j < raw.size else None)
            yield piece

    def text(self) -> str:
        return base64_native.text(self._raw())

    def _raw(self) -> np.ndarray:
        return np.ascontiguousarray(self.array).reshape(-1).view(np.uint8)

    def __repr__(self) -> str:
        return f"<base64 of {self.array.nbytes} bytes>"


class ConstEntry(dict):
    """A Constants-JSON entry: a plain dict to ``json`` and every reader, which also carries,
    within the process, the read-only float32 array its ``data_base64`` was (or will be) encoded from.

    ``decode_const`` takes the bytes from ``array`` instead of decoding the text only while
    ``data_base64`` is the text made from it, so an edited entry is decoded from its text as usual;
    every other check runs either way. ``detach()`` drops the array once the text exists (the entry
    is then an ordinary dict that gets decoded); an entry whose text was never read keeps it."""

    __slots__ = ("b64", "array")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.b64 = self.array = None

    def attach(self, b64: str, array: np.ndarray) -> "ConstEntry":
        self.b64, self.array = b64, array
        return self

    def attach_lazy(self, array: np.ndarray) -> "ConstEntry":
        """``data_base64`` becomes the base64 of ``array`` (read-only), made when first read."""
        self.b64, self.array = None, array
        dict.__setitem__(self, B64_KEY, Base64Text(array))
        return self

    def detach(self) -> None:
        if not isinstance(dict.get(self, B64_KEY), Base64Text):
            self.b64 = self.array = None

    def known_bytes(self) -> Optional[np.ndarray]:
        """The entry's bytes as a flat uint8 array when its base64 text is unchanged, else None."""
        array = getattr(self, "array", None)   # unset when built by __new__ alone (copy protocols)
        if array is None:
            return None
        value = dict.get(self, B64_KEY)
        if not (isinstance(value, Base64Text) and value.array is array) and value is not getattr(self, "b64", None):
            return None
        raw = array.reshape(-1).view(np.uint8)
        raw.flags.writeable = False   # decoded constants are read-only, like bytes from base64
        return raw

    # ----- the text, made on first read
    def _value(self, key, value):
        if isinstance(value, Base64Text):
            text = value.text()
            dict.__setitem__(self, key, text)
            self.b64 = text
            return text
        return value

    def json_items(self):
        """``items()`` with a text not made yet as a :class:`Base64Text` (``dump_json`` streams it)."""
        return dict.items(self)

    def __getitem__(self, key):
        return self._value(key, dict.__getitem__(self, key))

    def get(self, key, default=None):
        return self._value(key, dict.get(self, key, default))

    def items(self):
        return [(k, self._value(k, v)) for k, v in dict.items(self)]

    def values(self):
        return [self._value(k, v) for k, v in dict.items(self)]

    def __iter__(self):   # not dict's own iterator: dict(entry) and {**entry} then read through __getitem__
        return iter(dict.keys(self))

    def copy(self) -> dict:
        return dict(self.items())

    def pop(self, key, *default):
        if key in self:
            self[key]
        return dict.pop(self, key, *default)

    def popitem(self):
        for key in reversed(list(dict.keys(self))):
            self[key]
            break
        return dict.popitem(self)

    def setdefault(self, key, default=None):
        if key in self:
            return self[key]
        return dict.setdefault(self, key, default)

    def __eq__(self, other):
        if not isinstance(other, dict):
            return NotImplemented
        return dict(self.items()) == (dict(other.items()) if isinstance(other, ConstEntry) else other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce_ex__(self, protocol):
        return (dict, (dict(self.items()),))

"""JSON answers for the hot routes (append, history, render, folds), by orjson when installed.

A rendered prompt is tens of kilobytes of message text; the standard library
takes about half a millisecond to encode one, orjson a twentieth of that.
Everything encoded here is JSON the library has already checked (no NaN, string
keys), so both encoders give the same document; what orjson cannot write (an
integer past 64 bits in a message) goes to the standard library's encoder.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

try:
    import orjson
except ImportError:  # the server extra brings it; the stdlib encoder does the same, slower
    orjson = None  # type: ignore[assignment]


class FastJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        if orjson is None:
            return super().render(content)
        try:
            return orjson.dumps(content)
        except TypeError:  # an integer past 64 bits, which only the stdlib encoder writes
            return super().render(content)

"""excerpt: a value as an error message may echo it, its repr cut to a bounded length.

Error messages name the value that was wrong; a hostile one (a megabyte model name, a device string of any length)
would make the message as long as the value. Every message that echoes a value a user gave goes through
:func:`excerpt`, so a message stays a line whatever the value. Below every group (nothing imported), so that each
may use it.
"""

from __future__ import annotations

import os
import reprlib

EXCERPT_CHARS = 60  # the longest repr an excerpt keeps (a longer one: its head and tail around "...")


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` when it is at most ``limit`` characters; else its head and tail around ``...``, and for text
    (a ``str``, ``bytes`` or path) its length, e.g. ``'aaaa...aaaa' (300 characters)``.

    Only the kept part of a long string is read, so a megabyte name costs no more than a short one.
    """
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    shorten = reprlib.Repr()
    shorten.maxstring = shorten.maxother = shorten.maxlong = limit
    shown = shorten.repr(text)
    if isinstance(text, (str, bytes)) and len(shown) < len(repr(text[: limit + 1])):
        what = "characters" if isinstance(text, str) else "bytes"
        return f"{shown} ({len(text):,} {what})"
    return shown

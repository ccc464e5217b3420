"""Untrusted text made safe for a terminal: control and invisible formatting characters escaped.

Model names, backends and reasons in results files come from whoever wrote the file. Printed raw, an
ANSI escape sequence (ESC, CSI) could move the cursor, recolour or retitle the terminal, and a bidi
override (U+202E) or an invisible character could make a line read differently from what it holds.
`escape` shows each such character as a Python-style escape (`\\x1b`, `\\u202e`) and leaves every
other character, letters of any script included, as it is.
"""

from __future__ import annotations

import unicodedata

# Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width characters, BOM), line and
# paragraph separators, surrogates and private-use characters.
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` with every control or invisible formatting character written as an escape."""
    if text.isprintable():  # the usual case, decided in C (no control, format or separator characters)
        return text
    return "".join(_escaped(ch) if unicodedata.category(ch) in _UNSAFE else ch for ch in text)

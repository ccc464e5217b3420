"""How wide a line of text is drawn, to size SVG label columns so that no label is clipped.

An SVG cannot size itself to its text without a script, so the report estimates it: the advance widths
of printable ASCII in DejaVu Sans (rounded up to 1/100 em), one of the widest common sans-serif faces
and Debian's default, so the estimate is at least the width in narrower faces (Arial, Helvetica,
Roboto, Segoe UI); any other character counts as 1 em.
"""

from __future__ import annotations

# Advance widths in em of the characters 32 (space) to 126 (~), in order.
_ASCII_EM = (
    0.32, 0.41, 0.46, 0.84, 0.64, 0.96, 0.78, 0.28, 0.4, 0.4, 0.5, 0.84, 0.32, 0.37, 0.32, 0.34,
    0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.64, 0.34, 0.34, 0.84, 0.84, 0.84, 0.54,
    1.0, 0.69, 0.69, 0.7, 0.78, 0.64, 0.58, 0.78, 0.76, 0.3, 0.3, 0.66, 0.56, 0.87, 0.75, 0.79,
    0.61, 0.79, 0.7, 0.64, 0.62, 0.74, 0.69, 0.99, 0.69, 0.62, 0.69, 0.4, 0.34, 0.4, 0.84, 0.5,
    0.5, 0.62, 0.64, 0.55, 0.64, 0.62, 0.36, 0.64, 0.64, 0.28, 0.28, 0.58, 0.28, 0.98, 0.64, 0.62,
    0.64, 0.64, 0.42, 0.53, 0.4, 0.64, 0.6, 0.82, 0.6, 0.6, 0.53, 0.64, 0.34, 0.64, 0.84,
)  # fmt: skip
_OTHER_EM = 1.0


def text_width(text: str, font_px: float) -> float:
    """The width in px of `text` set in a sans-serif face of `font_px` px (an upper estimate)."""
    em = sum(_ASCII_EM[o - 32] if 32 <= (o := ord(c)) <= 126 else _OTHER_EM for c in text)
    return em * font_px

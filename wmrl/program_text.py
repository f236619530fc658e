"""Text a program controls, made safe to show (:func:`clean`), and the digest texts are keyed by
(:func:`text_sha256`).

A solution program writes its own stdout and stderr and chooses its exceptions' messages. Wherever wmrl shows
such text (a terminal, a report, the next turn's prompt, an exported dataset) it goes through :func:`clean`
first, which:

- removes terminal escape sequences: CSI (colours, cursor moves, clear screen), OSC (window title, OSC 8
  links, OSC 52 clipboard writes), DCS, SOS, PM and APC strings, and the short two-character escapes (``ESC c``
  resets a terminal), in their 7-bit (``ESC [``) and 8-bit (``\\x9b``) forms;
- writes every other control character, lone surrogate and bidirectional-override character escaped as
  visible text (``\\x00``, ``\\x1b``, ``\\ud800``, ``\\u202e``), so nothing it holds can act on a terminal,
  reorder the text around it, or fail to encode; newline and tab stay, and ``\\r\\n``, ``\\r``, NEL, and the
  Unicode line and paragraph separators each become one newline (a reader shows them as a line break);
- keeps at most ``limit`` characters: the tail (the end of a traceback is its useful part), after a marker
  saying how many characters were cut.

Escaping is idempotent: cleaning a cleaned text gives it back. Rich markup is not escaped here (a terminal's
console shows program text as :class:`rich.text.Text`, which is never parsed for markup:
:func:`wmrl.console.program_text`), and lines a program prints that look like the harness's own are dealt
with where the text is laid out (:meth:`wmrl.episodes.observation.Observation.render`).

This module imports nothing else of wmrl, so every layer may use it.
"""
from __future__ import annotations

import hashlib
import re

#: Escape sequences removed whole. An OSC, DCS, SOS, PM or APC string runs to its terminator (BEL or ST, 7- or
#: 8-bit) or, unterminated, to the end of the text; a CSI is its parameter and intermediate bytes and one final
#: byte; the remaining escapes are ESC, intermediate bytes (0x20-0x2F) and one final byte (0x30-0x7E).
_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"  # OSC, DCS, SOS, PM, APC
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # two-character escapes (ESC c, ESC 7, ESC ( B, ...)
)
#: Line breaks other than ``\n`` that a reader or a terminal would show as one.
_BREAK = re.compile("\r\n|[\r\x85\u2028\u2029]")
#: Characters shown escaped: C0 controls but tab and newline, DEL, C1 controls, lone surrogates, and the
#: bidirectional marks, embeddings, overrides and isolates.
_ESCAPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def cut_marker(n: int) -> str:
    """The line that replaces the first ``n`` characters of a text cut by :func:`clean`."""
    return f"[... {n} characters cut]\n"


def clean(text: object, limit: int | None = None) -> str:
    """``text`` with escape sequences removed and control characters shown escaped (module docstring).

    Args:
        text: the program's text; ``bytes`` are decoded as UTF-8 (bad bytes become U+FFFD), anything else
            goes through ``str``.
        limit: the most characters to return (the marker included), or None for no cap. When the cleaned
            text is longer, exactly ``limit`` characters are returned: :func:`cut_marker`, which says how many
            were cut, then the text's last characters; a limit shorter than the marker returns just the
            text's last ``limit`` characters.

    Returns:
        The cleaned text: only tab, newline and printable characters, no terminal escape sequence.

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 characters, got {limit}")
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    s = _ESCAPED.sub(_escape, _BREAK.sub("\n", _SEQUENCE.sub("", str(text))))
    if limit is None or len(s) <= limit:
        return s
    keep = limit - len(cut_marker(len(s)))
    if keep <= 0:
        return s[len(s) - limit:] if limit else ""
    while keep + 1 + len(cut_marker(len(s) - keep - 1)) <= limit:  # a shorter count leaves room for more text
        keep += 1
    return cut_marker(len(s) - keep) + s[len(s) - keep:]


def text_sha256(text: str) -> str:
    """SHA-256 hex digest of a text (a program, a prompt), UTF-8 encoded; a lone surrogate is hashed as its code
    point, so hashing never raises. The key of a program in the execution log, of a prompt in an exported row
    and of a neighbour's program and prompt in the world model."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()

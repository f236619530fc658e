"""The product speaks to its users: the package, the README and the docs name no issue numbers, commit hashes,
notes about the machine they were built on, or files outside the repository."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "wmrl").rglob("*.py"),
                *(ROOT / "wmrl").rglob("*.yaml")])
#: A short git hash: 7 to 12 hex digits with a letter and a digit, not part of a longer hex string (a SHA-256 digest
#: or a full 40-digit upstream revision is data, not a hash of this repository).
SHORT_HASH = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}(?![0-9A-Za-z])")
PATTERNS = {
    "a design file outside the repository": re.compile(r"DESIGN\.md"),
    "an issue number": re.compile(r"\b[Ii]ssues? ?#?\d+\b"),
    "the build machine": re.compile(r"\b(this|the build|the same) machine\b"),
    "a path outside the repository": re.compile(r"\.\./shared|/work/[a-z]"),
}


def test_no_builder_notes() -> None:
    hits = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        found = [(what, m.group(0)) for what, pat in PATTERNS.items() for m in pat.finditer(text)]
        found += [("a commit hash", m.group(0)) for m in SHORT_HASH.finditer(text)]
        hits += [f"{path.relative_to(ROOT)}: {what} ({text_!r})" for what, text_ in found]
    assert len(FILES) > 100 and not hits, "\n".join(hits[:20])


def test_the_short_hash_pattern_finds_hashes_and_spares_digests() -> None:
    assert SHORT_HASH.search("run on commit 2062a4c, then")
    assert not SHORT_HASH.search("sha256 " + "ab12" * 16)
    assert not SHORT_HASH.search("seed 1234567 and 0.8852103054523468")

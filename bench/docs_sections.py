"""Generated sections of a Markdown file, so that several commands can each
regenerate their own part of one document (and the README) without touching
the rest, hand-written text included.

A section is the text between ``<!-- begin: NAME (generated) -->`` and
``<!-- end: NAME -->``.  :func:`replace_section` replaces it, or appends it
at the end of the file when the file has no such section yet.
"""

from __future__ import annotations

import os
import re


def _markers(name: str) -> tuple[str, str]:
    if "-->" in name or "\n" in name:
        raise ValueError(f"section name {name!r} may not contain '-->' or a newline")
    return f"<!-- begin: {name} (generated) -->", f"<!-- end: {name} -->"


def replace_section(path: str, name: str, body: str) -> None:
    """Write ``body`` as section ``name`` of the file at ``path`` (created if missing)."""
    begin, end = _markers(name)
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{begin}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def read_section(path: str, name: str) -> str | None:
    """The body of section ``name`` of the file at ``path`` (None if absent)."""
    begin, end = _markers(name)
    if not os.path.exists(path):
        return None
    m = re.search(re.escape(begin) + r"\n(.*?)\n?" + re.escape(end), open(path).read(), re.DOTALL)
    return m.group(1) if m else None

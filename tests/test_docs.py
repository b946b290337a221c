"""The README stays short and its links lead somewhere: the two set-up
commands a new user runs, at most 12,000 characters, and every relative
link of the README and of docs/ naming a file of the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(path.read_text())
            if not re.match(r"[a-z]+://", target) and not target.startswith("mailto:")]


def test_the_readme_is_short_enough_to_read_in_five_minutes() -> None:
    assert len(README.read_text()) <= 12_000


def test_the_readme_gives_the_two_set_up_commands_ci_runs() -> None:
    text = README.read_text()
    assert "bash scripts/setup.sh && .venv/bin/python -m fxcut" in text
    assert "bash scripts/test.sh" in text
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_every_relative_link_names_a_file_of_the_repository() -> None:
    broken = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _relative_links(doc):
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_link_reader_sees_links_and_skips_urls(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("[a](docs/x.md#part) [b](https://example.org/y) [c](z.png)")
    assert _relative_links(page) == ["docs/x.md", "z.png"]

"""The command-line loop the zoo benchmarks share: one row per zoo case,
a progress line per row, a Markdown table that names the command which
produced it (printed, and written with ``--table FILE``).

    rows = zoo_rows(names, row, line)
    publish(markdown(rows, command_line("bench/x.py", args.table, options, args.cases)), args.table)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def zoo_rows(names: Iterable[str], row: Callable[[str], Row], line: Callable[[Row], str]) -> list[Row]:
    """``row(name)`` for every case, printing ``line(row)`` as each is done."""
    rows = []
    for name in names:
        r = row(name)
        rows.append(r)
        print(f"{name:14s} {line(r)}", flush=True)
    return rows


def command_line(script: str, table: Path | None, options: Sequence[str], cases: Sequence[str]) -> str:
    """The command that reproduces a table, as the table quotes it."""
    words = ["PYTHONPATH=python:tests python", script]
    if table is not None:
        words += ["--table", str(table)]
    return " ".join([*words, *options, *cases])


def publish(table: str, path: Path | None) -> None:
    """Print ``table``; write it to ``path`` too when given."""
    if path is not None:
        path.write_text(table)
    print(table)

"""Checks on a file an fxcut function or command will write, made before
the work that produces its contents, so a bad path fails at once instead of
after a long run."""

from __future__ import annotations

import os
from typing import Any


def check_output_path(path: Any, what: str, *, overwrite: bool = True) -> str:
    """``path`` as a str, or an error naming ``what`` (e.g. ``"--html"``):
    TypeError unless a str or os.PathLike, ValueError for an empty path, a
    directory, a missing parent directory, or an existing file when not
    ``overwrite`` (FileExistsError), PermissionError when the file or its
    directory is not writable."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path (str or os.PathLike), got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    if not text:
        raise ValueError(f"{what}: the path is empty")
    if os.path.isdir(text):
        raise ValueError(f"{what} {text!r} is a directory")
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        raise ValueError(f"{what} {text!r}: directory {parent!r} does not exist")
    if os.path.exists(text):
        if not overwrite:
            raise FileExistsError(f"{what} {text!r} exists (pass --force to overwrite it)")
        if not os.access(text, os.W_OK):
            raise PermissionError(f"{what} {text!r} is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{what} {text!r}: directory {parent!r} is not writable")
    return text

"""Warnings that point at the user's line.

fxcut warns from deep inside a compile: the user's ``compiled(x)`` calls
into dynamo, AOT Autograd, inductor and then fxcut.  :func:`warn_user`
gives :func:`warnings.warn` the stack level of the innermost frame outside
fxcut, torch and the standard library, so the warning names the user's
file and line (the outermost frame where every frame is such code).
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
import warnings
from functools import cache


@cache
def _library_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if isinstance(torch_file, str):
        dirs.append(os.path.dirname(os.path.abspath(torch_file)))
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(os.path.abspath(path))
    return tuple(d + os.sep for d in dirs)


def user_stacklevel() -> int:
    """The stack level, for a :func:`warnings.warn` called by this
    function's caller, of the innermost frame outside fxcut, torch and the
    standard library."""
    here = inspect.currentframe()
    # the caller's caller: stack level 2 of the caller's warn
    frame = here.f_back.f_back if here is not None and here.f_back is not None else None
    level, outermost = 2, 2
    dirs = _library_dirs()
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(dirs) and not frame.f_code.co_filename.startswith("<"):
            return level
        outermost = level
        frame = frame.f_back
        level += 1
    return outermost


def warn_user(message: str, category: type[Warning]) -> None:
    """:func:`warnings.warn` of ``message`` at the user's line."""
    warnings.warn(message, category, stacklevel=user_stacklevel() + 1)


__all__ = ["user_stacklevel", "warn_user"]

"""fxcut's entries in torch's structured trace (``TORCH_TRACE``, what tlparse renders).

Every graph fxcut partitions gets one artifact, ``fxcut_partition`` (JSON),
written with torch's ``trace_structured`` -- inside a compile, under the
compile's id, beside AOT Autograd's graphs -- and the compile id itself for
fxcut's own reports (:mod:`fxcut.route.report`).  Both names are private
to torch and optional to fxcut: where a release lacks one, nothing is
traced (or no id reported), and no partition changes.  The payload is made
only when the trace is on (torch calls ``payload_fn`` then only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the artifact's name in the trace (tlparse lists it under the compile)
ARTIFACT = "fxcut_partition"


def _trace_structured() -> Callable[..., None] | None:
    try:
        from torch import _logging
    except ImportError:
        return None
    found: Callable[..., None] | None = getattr(_logging, "trace_structured", None)
    return found


def artifact(payload_fn: Callable[[], str]) -> bool:
    """Write one ``fxcut_partition`` artifact (``payload_fn``: its JSON text,
    called only when the trace is on).  False where torch has no structured
    trace."""
    trace = _trace_structured()
    if trace is None:
        return False
    trace("artifact", metadata_fn=lambda: {"name": ARTIFACT, "encoding": "json"}, payload_fn=payload_fn,
          expect_trace_id=False)
    return True


def compile_id() -> str | None:
    """torch's id of the compile running now (``"0/0"``: frame 0, its first
    compile), or None outside one (or where torch does not say)."""
    try:
        from torch._guards import CompileContext
    except ImportError:
        return None
    current: Any = getattr(CompileContext, "current_compile_id", None)
    cid = current() if callable(current) else None
    return None if cid is None else str(cid)


__all__ = ["ARTIFACT", "artifact", "compile_id"]

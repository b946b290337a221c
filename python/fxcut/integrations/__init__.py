"""fxcut inside the tools that call a partitioner.

- :mod:`.torch_compile`: ``torch.compile`` backends (inductor, AOT Autograd)
  that partition with fxcut (:func:`inductor_backend`, :func:`aot_backend`).
- :mod:`.deepspeed`: makes DeepSpeed DeepCompile's backend use fxcut's
  ZeRO-3 walk and partitioner (``install()`` / ``uninstall()``).

Imported on first use: ``import fxcut`` does not import inductor or DeepSpeed.
"""

from __future__ import annotations

from typing import Any

_TORCH_COMPILE = ("InductorPartitioner", "aot_backend", "inductor_backend", "zero3_param_indices")

__all__ = list(_TORCH_COMPILE)


def __getattr__(name: str) -> Any:
    if name in _TORCH_COMPILE:
        from . import torch_compile

        return getattr(torch_compile, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

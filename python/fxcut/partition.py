"""fxcut's drop-in ``min_cut_rematerialization_partition``.

Until the C decision lands this delegates to the installed torch's own
partitioner, so callers already get torch's exact behaviour.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    return torch_partition(
        joint_module,
        _joint_inputs,
        compiler,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_indices=static_lifetime_input_indices,
        **kwargs,
    )

"""The decision's options, read from ``torch._functorch.config`` as the running release reads it.

The C core takes a :class:`fxcut.solve.core.MinCutOptions` (plain numbers
and switches); this module is where they come from: torch's config at call
time, as the release of the :class:`~fxcut.torchrules.versions.Rules` reads
it (an option the release lacks counts as the value it behaves as).
"""

from __future__ import annotations

import math
from typing import Any

from ..solve.core import MinCutOptions
from .versions import Rules


def min_cut_options(rules: Rules) -> MinCutOptions:
    """Read ``torch._functorch.config`` now, as torch does at call time, as
    the release of ``rules`` reads it."""
    config = _ConfigView(rules)
    opts = MinCutOptions(
        ban_if_used_far_apart=bool(config.ban_recompute_used_far_apart),
        ban_if_long_fusible_chains=bool(config.ban_recompute_long_fusible_chains),
        ban_if_materialized_backward=bool(config.ban_recompute_materialized_backward),
        ban_if_not_in_allowlist=bool(config.ban_recompute_not_in_allowlist),
        ban_if_reduction=bool(config.ban_recompute_reductions),
        recompute_views=bool(config.recompute_views),
        treat_parameters_as_free_to_save=bool(config.treat_parameters_as_free_to_save),
        is_non_builtin_to_include=bool(config.is_non_builtin_to_include),
        unsafe_allow_optimization_of_collectives=bool(config.unsafe_allow_optimization_of_collectives),
        max_dist_from_bw=_max_dist_from_bw(config.max_dist_from_bw),
    )
    return opts.aggressive() if config.aggressive_recomputation else opts


def _max_dist_from_bw(value: Any) -> int:
    """``config.max_dist_from_bw`` as the core's int.  torch compares node
    distances (ints) with it, so a finite float counts as its floor."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"torch._functorch.config.max_dist_from_bw must be an int, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"torch._functorch.config.max_dist_from_bw must be a finite number, got {value!r}")
        value = math.floor(value)
    if not -(2**62) <= value <= 2**62:
        raise ValueError(f"torch._functorch.config.max_dist_from_bw = {value} is out of range")
    return int(value)


class _ConfigView:
    """``torch._functorch.config`` as the running release reads it
    (:meth:`fxcut.torchrules.versions.Rules.config`), by attribute."""

    def __init__(self, rules: Rules) -> None:
        self._rules = rules

    def __getattr__(self, name: str) -> Any:
        return self._rules.config(name)


__all__ = ["min_cut_options"]

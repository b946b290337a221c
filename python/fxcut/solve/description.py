"""The exact solver's description of a plan problem, whatever its memory model.

The unfused and held models are described exactly (:mod:`fxcut.solve.liveness`);
the inductor model by a relaxation of that description whose peaks never exceed
it (:mod:`fxcut.solve.inductor_bound`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .inductor_bound import relax
from .liveness import Liveness, describe_parts

if TYPE_CHECKING:
    from .planner import PlanProblem


def describe(prob: PlanProblem) -> Liveness:
    """The description of ``prob`` (a :class:`fxcut.solve.planner.PlanProblem`)
    under its memory model; :class:`fxcut.solve.liveness.NotModelled` where the
    graph has a feature it cannot describe."""
    lv, g, bw, fw = describe_parts(prob)
    if prob.inductor is None:
        return lv
    return relax(lv, g, bw, fw, prob)


__all__ = ["describe"]

"""Types of fxcut's C extension (csrc/module.c), for type checkers.

tests/test_package_shape.py checks that this stub names exactly what the
extension exports.  Graph arguments are :class:`fxcut.lower.GraphArrays`
(read by attribute); int arrays are ``array('i')``/``array('q')`` or any
buffer of C ints.
"""

from collections.abc import Sequence
from typing import Any

from torch.fx import Node
from typing_extensions import Buffer

from fxcut.lower import GraphArrays

class InfiniteCutError(RuntimeError):
    """No finite cut: a value needed in backward can be neither saved nor recomputed."""

    node: int  # the node index the core names, where it names one
    chain: list[int] | list[str]  # node indices; fxcut.core replaces them by the nodes' names
    nodes: list[Node]  # set by fxcut.core with the names

BAN_COMPUTE_INTENSIVE: int
BAN_FAR_FROM_BACKWARD: int
BAN_FWD_SEED: int
BAN_LONG_FUSIBLE_CHAIN: int
BAN_MATERIALIZED_BACKWARD: int
BAN_MUST_SAVE: int
BAN_NONE: int
BAN_NON_BUILTIN: int
BAN_NOT_IN_ALLOWLIST: int
BAN_PRIMAL: int
BAN_RANDOM: int
BAN_REDUCTION: int
BAN_USED_FAR_APART: int
C_BANNED: int
C_INPUT: int
C_MUST_RECOMPUTE: int
C_REQUIRED_BW: int
C_REQUIRED_FW: int
C_SAVED: int
C_SINK_SIDE: int
C_TANGENTS_CLOSURE: int
F_BWD_SEED: int
F_BW_HOOK: int
F_CAST: int
F_CAT: int
F_COLLECTIVE: int
F_COMPUTE_INTENSIVE: int
F_FREE_OBJECT: int
F_FUSIBLE: int
F_FWD_SEED: int
F_GETITEM: int
F_HAS_AC_ID: int
F_IMPURE: int
F_IS_BACKWARD_TAG: int
F_LIFT_FRESH: int
F_MUST_BE_IN_BW: int
F_MUTABLE_HOP: int
F_NON_BUILTIN: int
F_NON_TENSOR: int
F_NO_COPY: int
F_NO_FUSE_OUT: int
F_PRIMAL: int
F_RANDOM: int
F_RECOMPUTABLE: int
F_SYM: int
F_SYMFLOAT: int
F_TANGENT: int
F_VAL_IS_SEQ: int
F_VIEW: int
F_WITH_EFFECTS: int
KIND_CALL_FUNCTION: int
KIND_CALL_METHOD: int
KIND_CALL_MODULE: int
KIND_GET_ATTR: int
KIND_OUTPUT: int
KIND_PLACEHOLDER: int
SIZE_UNKNOWN: int
STAGE_AGGRESSIVE: int
STAGE_INPUTS: int
STAGE_KNAPSACK: int
STAGE_MIN_CUT: int
STAGE_MORE_AGGRESSIVE: int
STAGE_NO_BACKWARD: int
STAGE_NO_CANDIDATES: int
TAG_NONE: int
WEIGHT_INF: int
WEIGHT_NONE: int

def validate(graph: GraphArrays, /) -> None: ...
def partition_decide(
    graph: GraphArrays,
    options: tuple[int, ...],
    static_lifetime: bytes | None,
    dont_ban: bytes | None,
    force_save: Buffer,
    fuse_a: Buffer,
    fuse_b: Buffer,
    /,
) -> dict[str, Any]: ...
def budget_plan(
    graph: GraphArrays,
    options: tuple[int, ...],
    static_lifetime: bytes | None,
    input_storage: bytes | None,
    force_save: Buffer,
    fuse_a: Buffer,
    fuse_b: Buffer,
    budget: float,
    /,
) -> dict[str, Any]: ...
def knapsack(
    memory: Sequence[float], runtime: Sequence[float], max_memory: float, solver: str, /
) -> tuple[bytes, bytes, float, int]: ...
def min_cut(
    n_vertices: int, tail: Buffer, head: Buffer, cap: Buffer, source: int, sink: int, algorithm: int = 0, /
) -> tuple[int, bytes]: ...
def param_alias_walk(graph: GraphArrays, params: Buffer, /) -> bytes: ...

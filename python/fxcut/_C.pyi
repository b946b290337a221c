"""Types of fxcut's C extension (csrc/module.c), for type checkers.

tests/test_package_shape.py checks that this stub names exactly what the
extension exports.  Graph arguments are :class:`fxcut.solve.arrays.GraphArrays`
(read by attribute); int arrays are ``array('i')``/``array('q')`` or any
buffer of C ints.
"""

from collections.abc import Sequence
from typing import Any

from torch.fx import Node
from typing_extensions import Buffer

from fxcut.torchrules.lower import ReaderConfig
from fxcut.solve.arrays import GraphArrays
from fxcut.torchrules.prepare import CseKeyConfig, PlanConfig

class InfiniteCutError(RuntimeError):
    """No finite cut: a value needed in backward can be neither saved nor recomputed."""

    node: int  # the node index the core names, where it names one
    chain: list[int]  # node indices of the infinite path, as the core found it
    nodes: list[object]  # set by fxcut.solve.core: the chain's nodes (GraphArrays.handles: fx nodes from lowering)

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
CAP_INF: int
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
F_MUST_BE_IN_FW: int
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
PLAN_ROLE_BACKWARD: int
PLAN_ROLE_INPUT: int
PLAN_ROLE_SAVE: int
PLAN_ROLE_FREE: int
PLAN_ROLE_RECOMPUTE: int
PLAN_MAX_THREADS: int
STAGE_MIN_CUT: int
STAGE_MORE_AGGRESSIVE: int
STAGE_NO_BACKWARD: int
STAGE_NO_CANDIDATES: int
TAG_NONE: int
KEEP_BUILD_ONLY: int
KEEP_NETWORK: int
KEEP_NONE: int
KNAPSACK_SOLVERS: tuple[str, ...]
MAXFLOW_DEFAULT: int
MAXFLOW_DINIC: int
MAXFLOW_PUSH_RELABEL: int
TAG_MUST_CPU_OFFLOAD: int
TAG_MUST_RECOMPUTE: int
TAG_MUST_SAVE: int
TAG_PREFER_CPU_OFFLOAD: int
TAG_PREFER_RECOMPUTE: int
TAG_PREFER_SAVE: int
WEIGHT_INF: int
WEIGHT_NONE: int
X_COPY: int
X_MUST_FW: int
FUSE_POINTWISE: int
FUSE_REDUCTION: int
FUSE_EXTERN: int
FUSE_CAT: int
FUSE_HEAVY: int
FUSE_COPIES_INPUTS: int
FUSE_ABSORBED: int
FUSE_LAYOUT: int
FUSE_KIND_MASK: int

class Decision(tuple[Any, ...]):
    """What partition_decide decided, by node index (a struct sequence)."""

    @property
    def tag(self) -> memoryview: ...  # int8, TAG_*
    @property
    def node_class(self) -> memoryview: ...  # uint8, C_* bits
    @property
    def ban_reason(self) -> memoryview: ...  # uint8, BAN_*
    @property
    def dist_from_bw(self) -> memoryview: ...  # int64
    @property
    def weight(self) -> memoryview: ...  # int64, WEIGHT_INF / WEIGHT_NONE
    @property
    def saved(self) -> memoryview: ...  # int32, graph order
    @property
    def n_required_bw(self) -> int: ...
    @property
    def cut_value(self) -> int: ...
    @property
    def network(self) -> tuple[memoryview, memoryview, memoryview] | None: ...

class BudgetPlan(tuple[Any, ...]):
    """What budget_plan planned (a struct sequence)."""

    @property
    def stage(self) -> int: ...  # STAGE_*
    @property
    def decision(self) -> Decision: ...
    @property
    def candidates(self) -> memoryview: ...  # int32
    @property
    def memories(self) -> memoryview: ...  # float64
    @property
    def min_act_size(self) -> float: ...
    @property
    def max_act_size(self) -> float: ...
    @property
    def ratio_more_aggressive(self) -> float: ...
    @property
    def ratio_aggressive(self) -> float: ...
    @property
    def n_passes(self) -> int: ...

class KnapsackResult(tuple[Any, ...]):
    """What a knapsack solver chose (a struct sequence)."""

    @property
    def save(self) -> memoryview: ...  # uint8
    @property
    def order(self) -> memoryview: ...  # int32
    @property
    def value(self) -> float: ...
    @property
    def peak_bytes(self) -> int: ...

class MemoryResult(tuple[Any, ...]):
    """What memory_simulate simulated (a struct sequence)."""

    @property
    def peak_bytes(self) -> int: ...
    @property
    def peak_step(self) -> int: ...  # -1 when there is no step
    @property
    def fw_peak_bytes(self) -> int: ...
    @property
    def bw_peak_bytes(self) -> int: ...
    @property
    def saved_bytes(self) -> int: ...
    @property
    def recompute_flops(self) -> int: ...
    @property
    def recompute_bytes(self) -> int: ...
    @property
    def n_recomputed(self) -> int: ...
    @property
    def n_fw_steps(self) -> int: ...
    @property
    def recomputed(self) -> memoryview: ...  # uint8, n entries
    @property
    def schedule(self) -> memoryview | None: ...  # int32, with timeline
    @property
    def live_bytes(self) -> memoryview | None: ...  # int64, with timeline

def validate(graph: GraphArrays, /) -> None: ...
def memory_simulate(
    graph: GraphArrays,
    /,
    *,
    num_fwd_outputs: int,
    saved: Buffer,
    storage_of: Buffer | None = None,
    flops: Buffer | None = None,
    marks: Buffer | None = None,
    timeline: bool = False,
    fusion: Buffer | None = None,
    fused_cost: Buffer | None = None,
    iteration: Buffer | None = None,
    realize: tuple[int, int, int] | None = None,
    hold_saved: bool = False,
    workspace: Buffer | None = None,
    kernel_calls: bool = False,
) -> MemoryResult: ...
def partition_decide(
    graph: GraphArrays,
    options: Any,
    /,
    *,
    num_fwd_outputs: int,
    keep_network: int = 0,
    static_lifetime: bytes | None = None,
    dont_ban: bytes | None = None,
    force_save: Buffer | None = None,
    fuse_a: Buffer | None = None,
    fuse_b: Buffer | None = None,
) -> Decision: ...
def budget_plan(
    graph: GraphArrays,
    options: Any,
    /,
    *,
    num_fwd_outputs: int,
    memory_budget: float,
    static_lifetime: bytes | None = None,
    input_storage: bytes | None = None,
    force_save: Buffer | None = None,
    fuse_a: Buffer | None = None,
    fuse_b: Buffer | None = None,
) -> BudgetPlan: ...
def knapsack(
    memory: Sequence[float], runtime: Sequence[float], max_memory: float, solver: str, /
) -> KnapsackResult: ...
def min_cut(
    n_vertices: int, tail: Buffer, head: Buffer, cap: Buffer, source: int, sink: int, algorithm: int = 0
) -> tuple[int, bytes]: ...
def param_alias_walk(graph: GraphArrays, params: Buffer, /) -> bytes: ...
def aggressive_options(options: Any, /) -> dict[str, bool]: ...
def plan_simulate(
    graph: GraphArrays,
    /,
    *,
    num_fwd_outputs: int,
    role: Buffer,
    saved: Buffer,
    storage_of: Buffer | None = None,
    flops: Buffer | None = None,
    marks: Buffer | None = None,
    fusion: Buffer | None = None,
    fused_cost: Buffer | None = None,
    iteration: Buffer | None = None,
    realize: tuple[int, int, int] | None = None,
    hold_saved: bool = False,
    workspace: Buffer | None = None,
    kernel_calls: bool = False,
) -> tuple[int, int, int, int, int, int, int, int, bytes, memoryview, memoryview]: ...
def plan_frontier(
    graph: GraphArrays,
    /,
    *,
    num_fwd_outputs: int,
    role: Buffer,
    storage_of: Buffer | None = None,
    flops: Buffer | None = None,
    seeds: Buffer | None = None,
    exact_max_free: int = 16,
    max_work: int = 4000000000,
    time_limit: float = 1.0,
    max_points: int = 1024,
    marks: Buffer | None = None,
    fusion: Buffer | None = None,
    fused_cost: Buffer | None = None,
    iteration: Buffer | None = None,
    realize: tuple[int, int, int] | None = None,
    threads: int = 0,
    hold_saved: bool = False,
    workspace: Buffer | None = None,
    kernel_calls: bool = False,
) -> tuple[memoryview, memoryview, bytes, int, int, bool, bool, int, bool, int]: ...
def cse_key(
    args: Any, kwargs: Any, env: dict[Any, Any], config: CseKeyConfig
) -> tuple[tuple[Any, ...], Any, tuple[Any, ...], Any, int] | None: ...
def prepare_plan(
    nodes: list[Any],
    node_facts: Any,
    config: PlanConfig,
    /,
    *,
    eliminate_dead: bool,
    cse: bool,
) -> tuple[set[Any], dict[Any, Any], dict[Any, int] | None]: ...
def lower_read(
    nodes: list[Any],
    replace: dict[Any, Any] | None,
    config: ReaderConfig,
    /,
) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, list[int], dict[Any, int]] | None: ...
def placeholder_role(name: str, /) -> int: ...
def partitioner_tag_flags(tag: object, mutable: bool, /) -> int: ...

"""What differs between the torch releases fxcut follows, in one table.

fxcut's decision must equal the installed torch's own partitioner, and that
partitioner changes from release to release.  Every difference that can
change a decision or a generated graph is one field of :class:`Rules`, set
per release in :data:`RELEASES`; the decision code asks :func:`current` for
the running torch's rules and never compares versions itself.  Read down a
column of the table to see what changed in which release.

Who builds the forward and backward modules from the saved values is a
field too (:attr:`Rules.module_builder`): fxcut's own builder
(:mod:`fxcut.torchrules.extract`, node for node what that release's extraction,
reordering and ``raise_getitems`` passes build) on every supported release,
the release's differences in module building being fields too
(``flags_backward_nodes``, ``marks_static_inputs``); it leaves the graphs it
does not model (RNG functionalization, activation offloading, collectives,
...) to torch's passes.  So are the private ``torch.fx`` attributes
:mod:`fxcut.torchrules.snapshot` reads and writes to undo a failed partition
(:attr:`Rules.fx_internals`; tests/test_versions.py checks them on every
release).  Differences torch's own code absorbs need no entry: fxcut reads
the op lists (``get_default_op_list``), the purity test and the
symbol-binding helpers from the installed torch.

Every private torch, torch.fx and CPython name or layout fxcut relies on
is a row of :data:`PRIVATE_NAMES` (:class:`Private`: the name, whose, the
fxcut modules and C readers that rely on it, the releases, how it is
checked); the snapshot's :class:`FxInternals` are folded into it.  The
compatibility gate (:mod:`fxcut.torchrules.gate`) checks the rows once per
process; tests/test_compat_gate.py keeps the table honest both ways.

The tested releases: :data:`TESTED` holds the exact releases CI runs the
fidelity suite on.  Any other torch -- older, newer, a nightly, or another
patch release of a tested minor -- is *untested*: :mod:`fxcut.route.guard`
hands such graphs to torch's own partitioner.

Adding a release: diff its ``torch/_functorch/partitioners.py`` (and
``compile_utils.fx_graph_cse``, ``config.py``) against the newest row's;
add a row that copies the newest and sets a field per change (a new field
when a change is new: the code that reads it, then a test in
tests/test_versions.py pinning both settings); add the patch release to
scripts/matrix.sh and run it.

What changed, release by release (each a field below):

- 2.13: sizes of ops without returns; region memory budgets;
  ``unsafe_treat_script_objects_as_zero_size`` (absent in 2.12); the
  backward's nodes flagged ``autograd_backward``.
- 2.14: SDPA without dropout is not an RNG op; CSE keeps backward values
  apart, skips impure nodes and mutation bases, compares floats by bits,
  keys on streams; the budget's no-candidate case saves the aggressive cut;
  the backward's symbol bindings also cover symbols before ShapeEnv
  replacements; ``control_deps`` split (not modelled: torch decides).
- 2.15: module extraction marks the primals ``is_static_input``;
  ``torch.device`` values, epilogue-mutated inputs, effectful ops' leaf
  outputs (not modelled: torch decides);
  ``activation_memory_budget_require_full_coverage``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import torch


#: :attr:`Rules.module_builder`: fxcut's own builder of the forward and backward modules ...
BUILDER_FXCUT = "fxcut.torchrules.extract"
#: ... or torch's extraction and the passes after it (``_extract_fwd_bwd_modules``,
#: ``functionalize_rng_ops``, ``reordering_to_mimic_autograd_engine``, ``raise_getitems``, ...)
BUILDER_TORCH = "torch._functorch.partitioners"


@dataclass(frozen=True)
class FxInternals:
    """The private ``torch.fx`` attributes :mod:`fxcut.torchrules.snapshot` relies on
    (to put a module back exactly as it was when a partition fails, and to
    copy one), in one release."""

    #: GraphModule attributes ``recompile`` (re)writes: saved and restored
    #: by value (absent ones stay absent)
    module_fields: tuple[str, ...]
    #: Graph attributes fxcut's CSE emulation or torch's passes rewrite:
    #: saved and restored by value
    graph_fields: tuple[str, ...]
    #: Graph attributes the restore rebuilds: the sentinel node, the node
    #: count, the ``find_nodes`` table, the name table (whose instance
    #: attributes are saved and restored)
    graph_internals: tuple[str, ...]
    #: Node attributes and methods the restore uses to relink, unlink and
    #: re-argument nodes
    node_internals: tuple[str, ...]


_FX_INTERNALS = FxInternals(
    module_fields=("_code", "_lineno_map", "_prologue_start", "_in_spec", "_out_spec"),
    graph_fields=("_codegen", "_tracer_cls", "_tracer_extras", "_co_fields", "_owning_module"),
    graph_internals=("_root", "_len", "_find_nodes_lookup_table", "_graph_namespace"),
    node_internals=("_erased", "_prev", "_next", "_remove_from_list", "_prepend", "_update_args_kwargs"),
)


@dataclass(frozen=True)
class Rules:
    """The partitioner's behaviour in one torch release (major.minor)."""

    #: "2.13"
    release: str
    #: the patch release the fidelity suite runs on
    tested: str
    #: ``torch._functorch.config`` names fxcut reads that this release does
    #: not have, with the value its partitioner behaves as
    missing_config: dict[str, Any] = field(default_factory=dict)
    #: a value of an op without return values (no ``meta["val"]``) takes 0
    #: bytes; before 2.13 only ``aten._assert_scalar`` (and get_attr) did
    no_return_ops_take_no_memory: bool = True
    #: ``region_activation_memory_budget`` annotations set the budget (2.13)
    region_memory_budgets: bool = True
    #: an SDPA-family op (a ``dropout_p`` argument) counts as an RNG op even
    #: when ``dropout_p`` is statically 0 (for the RNG functionalization
    #: of recomputed random ops); 2.14 drops that
    zero_dropout_sdpa_is_rng: bool = True
    #: CSE before the cut (``fx_graph_cse``), 2.14: never merges a value the
    #: backward needs with one it does not ...
    cse_keeps_backward_apart: bool = False
    #: ... skips impure nodes ...
    cse_skips_impure: bool = False
    #: ... keeps the mutable bases of functional wrappers
    #: (auto_functionalized(_v2), user triton kernels) distinct ...
    cse_skips_mutation_bases: bool = False
    #: ... compares float/complex arguments by bit pattern (nan == nan,
    #: 0.0 != -0.0) ...
    cse_floats_by_bits: bool = False
    #: ... and only merges nodes of one stream / memory pool
    #: (``meta["custom"]``)
    cse_keys_stream: bool = False
    #: memory budget: when no banned node is left for the knapsack, save the
    #: "aggressive" cut (2.14) instead of the inputs and MUST_SAVE nodes
    no_candidates_saves_aggressive_cut: bool = False
    #: module extraction binds, for each saved value and tangent, the
    #: symbols of its sizes both after and before the ShapeEnv's
    #: replacements (2.14): two SymInt inputs with one symbol (one replaced
    #: by the other) then both reach the backward, though it reads one
    binds_unreplaced_symbols: bool = False
    #: the partitioner splits ``control_deps`` nodes between forward and
    #: backward (2.14): fxcut does not model that, torch decides such graphs
    splits_control_deps: bool = False
    #: 2.15: a node whose value is a ``torch.device`` takes no memory and is
    #: never banned; fxcut does not model that, torch decides such graphs
    device_values_are_free: bool = False
    #: 2.15: a primal AOT Autograd mutates after the forward
    #: (``meta["aot_runtime_epilogue_input_mutation"]``) can never be saved;
    #: fxcut does not model that, torch decides such graphs
    epilogue_mutated_inputs_unsaveable: bool = False
    #: 2.15: an effectful op tagged MUST_RECOMPUTE is an error, and only the
    #: leaf getitems of an effectful op are forced saved; torch decides such
    #: graphs
    effectful_leaves_only: bool = False
    #: who builds the forward and backward modules from the saved values:
    #: :data:`BUILDER_FXCUT` (:mod:`fxcut.torchrules.extract`, as this release's
    #: extraction, reordering and raise_getitems passes would; it still
    #: leaves some graphs to torch's passes, see
    #: :func:`fxcut.torchrules.extract.unsupported_reason`) or :data:`BUILDER_TORCH`
    #: (torch's passes)
    module_builder: str = BUILDER_FXCUT
    #: the private torch.fx attributes :mod:`fxcut.torchrules.snapshot` relies on
    fx_internals: FxInternals = _FX_INTERNALS
    #: module extraction flags the backward's nodes
    #: (``meta["autograd_backward"]``, 2.13)
    flags_backward_nodes: bool = True
    #: module extraction marks each primal placeholder's meta
    #: ``is_static_input`` (a static-lifetime input or not; 2.15)
    marks_static_inputs: bool = False
    #: where ``enable_activation_offloading`` lives
    offloading_module: str = "torch._functorch._activation_offloading.activation_offloading"
    #: inductor's ops whose use makes a pointwise value read by two or more
    #: kernels a buffer on CPU (``StorageBox.should_realize_on_reuse``'s
    #: ``heavy_ops``; 2.12: exp and sigmoid only)
    cpu_heavy_ops: frozenset[str] = frozenset({"exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh"})

    def __post_init__(self) -> None:
        if self.module_builder not in (BUILDER_FXCUT, BUILDER_TORCH):
            raise ValueError(f"Rules({self.release!r}).module_builder = {self.module_builder!r}: "
                             f"expected {BUILDER_FXCUT!r} or {BUILDER_TORCH!r}")

    def config(self, name: str) -> Any:
        """``torch._functorch.config.<name>`` now, or the value this release
        behaves as when it has no such option."""
        from torch._functorch import config

        if name in self.missing_config:
            return self.missing_config[name]
        return getattr(config, name)


_BEFORE_215 = {"activation_memory_budget_require_full_coverage": True}
_R212 = Rules(
    release="2.12",
    tested="2.12.1",
    missing_config={"unsafe_treat_script_objects_as_zero_size": False, **_BEFORE_215},
    no_return_ops_take_no_memory=False,
    region_memory_budgets=False,
    flags_backward_nodes=False,
    cpu_heavy_ops=frozenset({"exp", "sigmoid"}),
)
_R213 = Rules(release="2.13", tested="2.13.0", missing_config=_BEFORE_215)
_R214 = Rules(
    release="2.14",
    tested="2.14.1",
    missing_config=_BEFORE_215,
    zero_dropout_sdpa_is_rng=False,
    cse_keeps_backward_apart=True,
    cse_skips_impure=True,
    cse_skips_mutation_bases=True,
    cse_floats_by_bits=True,
    cse_keys_stream=True,
    no_candidates_saves_aggressive_cut=True,
    binds_unreplaced_symbols=True,
    splits_control_deps=True,
)
_R215 = replace(
    _R214,  # 2.15 is 2.14 with these changes:
    release="2.15",
    tested="2.15.0",
    missing_config={},
    marks_static_inputs=True,
    device_values_are_free=True,
    epilogue_mutated_inputs_unsaveable=True,
    effectful_leaves_only=True,
)

#: per major.minor release
RELEASES: dict[str, Rules] = {r.release: r for r in (_R212, _R213, _R214, _R215)}
#: the exact releases the fidelity suite runs on (CI's matrix)
TESTED: tuple[str, ...] = tuple(r.tested for r in RELEASES.values())
#: the tested range, inclusive
OLDEST, NEWEST = TESTED[0], TESTED[-1]

#: ``FXCUT_ALLOW_UNTESTED_TORCH=1``: run fxcut on an untested torch anyway
ALLOW_UNTESTED_ENV = "FXCUT_ALLOW_UNTESTED_TORCH"


def parse(version: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a final release such as ``2.14.1+cu130``;
    None for anything else (a nightly ``2.16.0.dev20260101``, an rc)."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(\+[\w.]+)?", version.strip())
    if m is None:
        return None
    return int(m[1]), int(m[2]), int(m[3])


def installed_version() -> str:
    """The running torch's version string (tests fake it here)."""
    return str(torch.__version__)


def rules_for(version: str) -> Rules | None:
    """The rules of ``version`` when it is one of the releases fxcut is
    tested on (:data:`TESTED`; a local build tag such as ``+cu130`` or
    ``+cpu`` aside), else None.  A patch release fxcut has not run its
    fidelity suite on -- 2.13.1 beside a tested 2.13.0 -- is untested: a
    patch release can change the partitioner (docs/compat_gate.md)."""
    parsed = parse(version)
    if parsed is None:
        return None
    rules = RELEASES.get(f"{parsed[0]}.{parsed[1]}")
    if rules is None or parse(rules.tested) != parsed:
        return None
    return rules


def current() -> Rules | None:
    """The running torch's rules; None on an untested torch."""
    return rules_for(installed_version())


def rules_or_nearest() -> Rules:
    """The running torch's rules, or -- on an untested torch the user chose to
    run fxcut on -- those of its major.minor release when the table has it
    (a nightly or rc of a known release), else of the nearest release."""
    return running()[0]


def running() -> tuple[Rules, bool]:
    """The running torch's rules as :func:`rules_or_nearest` gives them, and
    whether that torch is tested (:func:`current` is not None): the one
    lookup a partition call makes (its guard), handed down in the Plan."""
    version = installed_version()
    found = rules_for(version)
    if found is not None:
        return found, True
    return _nearest(version), False


def _nearest(version: str) -> Rules:
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is not None and f"{m[1]}.{m[2]}" in RELEASES:
        return RELEASES[f"{m[1]}.{m[2]}"]
    ordered = sorted(RELEASES.values(), key=lambda r: parse(r.tested))  # type: ignore[arg-type, return-value]
    if m is not None and (int(m[1]), int(m[2])) < parse(OLDEST)[:2]:  # type: ignore[index]
        return ordered[0]
    return ordered[-1]


def tested_range() -> str:
    """The releases fxcut is tested on, for messages."""
    return f"tested: {', '.join(TESTED)}"


# --------------------------------------------------------------------------- the private names


#: :attr:`Private.kind`: whose the name or layout is
TORCH, TORCH_FX, CPYTHON, DEEPSPEED = "torch", "torch.fx", "CPython", "DeepSpeed"
#: :attr:`Private.how`: how the compatibility gate (:mod:`fxcut.torchrules.gate`)
#: checks the entry -- the dotted name resolves (a module's, a class's
#: attribute, or an attribute of a small probe object of that class) ...
ATTRIBUTE = "attribute"
#: ... it may be absent, and fxcut reads it with a default (nothing to
#: resolve; the note says what absence means) ...
OPTIONAL = "optional"
#: ... a member slot of ``torch._C._NodeBase`` that ``torch.fx.Node`` does
#: not shadow, holding what the public attribute of that name gives (the
#: C readers read it at its offset, or by name) ...
NODE_SLOT = "node slot"
#: ... a C-level layout: the note says what keeps a difference from giving
#: a wrong answer (a check in C, or a use that is only a prefetch hint)
LAYOUT = "layout"


@dataclass(frozen=True)
class Private:
    """One private torch, torch.fx or CPython name (or memory layout) fxcut
    relies on: what it is, whose, which fxcut modules (or C readers) rely on
    it, on which releases, and how the compatibility gate checks it."""

    #: the dotted name as fxcut reaches it (``torch.fx.graph._illegal_names``);
    #: an instance attribute under its class (``torch.fx.Graph._len``); a
    #: layout under what it lays out
    name: str
    #: :data:`TORCH`, :data:`TORCH_FX`, :data:`CPYTHON` or :data:`DEEPSPEED`
    kind: str
    #: the fxcut modules (``fxcut.torchrules.extract``) and C readers
    #: (``csrc/py_lower.c``) that rely on it
    users: tuple[str, ...]
    #: the releases (``"2.14"``) on which fxcut relies on it; None: on every
    #: supported release
    releases: tuple[str, ...] | None = None
    #: :data:`ATTRIBUTE`, :data:`OPTIONAL`, :data:`NODE_SLOT` or :data:`LAYOUT`
    how: str = ATTRIBUTE
    #: when fxcut uses it, if not on every partition (the gate checks those
    #: where they are used, not at the first partition of a process)
    when: str = ""
    #: what it is for, or what absence means
    note: str = ""

    def applies_to(self, release: str) -> bool:
        return self.releases is None or release in self.releases


_EXTRACT, _PREPARE, _CODEGEN, _SNAPSHOT, _OPS = (f"fxcut.torchrules.{m}" for m in (
    "extract", "prepare", "codegen", "snapshot", "ops"))
_VERSIONS, _GATE = "fxcut.torchrules.versions", "fxcut.torchrules.gate"
_LOWER, _BUILD, _FEATURES, _ASK = (f"fxcut.torchrules.{m}" for m in ("lower", "build", "features", "ask"))
_BUDGET, _HAZARDS = "fxcut.torchrules.budget", "fxcut.torchrules.hazards"
_TRACE = "fxcut.torchrules.trace"
_GUARD = "fxcut.route.guard"
_TORCH_COMPILE, _DEEPSPEED = "fxcut.integrations.torch_compile", "fxcut.integrations.deepspeed"
_PY_LOWER, _PY_PREPARE, _PY_CSE = "csrc/py_lower.c", "csrc/py_prepare.c", "csrc/py_cse.c"
_TP, _AOT = "torch._functorch.partitioners", "torch._functorch._aot_autograd"
_FROM_214 = ("2.14", "2.15")
_FUSION, _INDUCTOR = "fxcut.torchrules.fusion", "fxcut.torchrules.inductor"
#: rows used only by the plan on inductor's memory model: a failure there leaves the model's pick
#: (planned_check) or raises from the opt-in planner, never touches the default path
_INDUCTOR_PLAN = "the plan on inductor's memory model (memory_model='inductor')"


def _rows(kind: str, users: tuple[str, ...], *names: str, **fields: Any) -> list[Private]:
    return [Private(name, kind, users, **fields) for name in names]


_LISTED: list[Private] = [
    # torch's partitioner and AOT Autograd: the passes fxcut hands graphs to or copies
    *_rows(TORCH, (_BUILD,), f"{_TP}._extract_fwd_bwd_modules", f"{_TP}.default_partition",
           f"{_TP}.functionalize_rng_ops", f"{_TP}.reordering_to_mimic_autograd_engine", f"{_TP}.raise_getitems",
           f"{_TP}.thread_graphsafe_rng_from_hops", f"{_TP}._sync_decision_cross_ranks"),
    Private(f"{_TP}._is_primal", TORCH, (_BUILD, _BUDGET)),
    *_rows(TORCH, (_BUDGET,), f"{_TP}._is_fwd_seed_offset", f"{_TP}.NodeInfo", f"{_TP}.estimate_runtime",
           f"{_TP}._optimize_runtime_with_given_memory"),
    Private(f"{_TP}._extract_fwd_bwd_outputs", TORCH, (_EXTRACT,)),
    Private(f"{_TP}._free_symbols_without_replacements", TORCH, (_EXTRACT,), releases=_FROM_214,
            note="the backward's symbol bindings before ShapeEnv replacements (Rules.binds_unreplaced_symbols)"),
    Private(f"{_TP}.get_default_op_list", TORCH, (_OPS,)),
    Private(f"{_TP}.min_cut_rematerialization_partition", TORCH, (_GUARD, _DEEPSPEED),
            note="torch's own partitioner, captured when its module runs: every hand-off to torch"),
    Private("torch._functorch.compilers.min_cut_rematerialization_partition", TORCH, (_GUARD,)),
    Private("torch._dynamo.backends.debugging.boxed_nop", TORCH, (_TORCH_COMPILE,),
            note="aot_eager's compiler: eager kernels, each saved value freed after its last use"),
    Private(f"{_AOT}.utils._is_tangent", TORCH, (_EXTRACT, _ASK),
            note="ask: whether a graph's saved tensors outlive its run (a non-scalar tangent)"),
    *_rows(TORCH, (_EXTRACT,), f"{_AOT}.utils._is_primal",
           f"{_AOT}.utils._is_fwd_seed_offset", f"{_AOT}.utils._is_bwd_seed_offset",
           f"{_AOT}.descriptors.SavedForBackwardsAOTOutput", f"{_AOT}.descriptors.SavedForBackwardsNoVcCheckAOTOutput"),
    Private(f"{_AOT}.utils.is_with_effects", TORCH, (_OPS,)),
    Private(f"{_AOT}.graph_compile.is_opaque_node", TORCH, (_LOWER, _EXTRACT)),
    *_rows(TORCH, (_PREPARE,), "torch._functorch.compile_utils.get_aten_target",
           "torch._functorch.compile_utils.rand_ops", "torch._inductor.pattern_matcher.is_mutation_op"),
    Private("torch._functorch._activation_offloading.activation_offloading.enable_activation_offloading", TORCH,
            (_VERSIONS, _BUILD), when="config.enable_activation_offloading",
            note="Rules.offloading_module; the plan imports it only when offloading is on"),
    # torch's config
    Private("torch._functorch.config", TORCH, (_VERSIONS, _BUDGET),
            note="its options are read through Rules.config; an option a release lacks is in Rules.missing_config"),
    Private("torch._functorch.config._sync_decision_cross_ranks", TORCH, (_BUILD,)),
    *_rows(TORCH, (_BUDGET,), "torch._functorch.config.patch",
           "torch._functorch.config.activation_memory_budget_runtime_estimator"),
    Private("torch._inductor.config.fallback_random", TORCH, (_OPS,)),
    Private("torch._inductor.config.post_grad_fusion_options", TORCH, (_EXTRACT,)),
    Private("torch._inductor.config.custom_partitioner_fn", TORCH, (_DEEPSPEED,)),
    Private("torch._inductor.config.get_config_copy", TORCH, (_TORCH_COMPILE,)),
    # inductor, dynamo, the op registry, the library
    *_rows(TORCH, (_BUDGET,), "torch._inductor.custom_graph_pass.CustomKnapsackSolver",
           "torch._inductor.custom_graph_pass.CustomRuntimeEstimator", "torch._inductor.fx_utils.get_node_storage",
           "torch._C._has_storage", "torch.utils._mode_utils.no_dispatch"),
    *_rows(TORCH, (_TORCH_COMPILE,), "torch._inductor.custom_graph_pass.CustomPartitionerFn",
           "torch._inductor.compile_fx.compile_fx", "torch._dynamo.backends.common.aot_autograd"),
    Private("torch._functorch.aot_autograd.aot_module_simplified", TORCH, (_TORCH_COMPILE,),
            note="its signature: the keywords aot_backend() passes on (an unknown one is a TypeError)"),
    Private("torch._inductor.compile_fx.partition_fn", TORCH, (_DEEPSPEED,)),
    Private("torch._inductor.fx_passes.control_dependencies.control_deps", TORCH, (_FEATURES,), releases=_FROM_214,
            note="the control_deps op torch splits (Rules.splits_control_deps): such graphs go to torch"),
    Private("torch._guards.TracingContext", TORCH, (_OPS,)),
    Private("torch._C._dispatch_get_all_op_names", TORCH, (_OPS,)),
    Private("torch._C._NodeBase", TORCH, (_EXTRACT, _GATE),
            note="its __init__ creates a node as fx.Node's ends; its member slots are what the C readers read"),
    Private("torch._ops.OpOverload", TORCH, (_LOWER, _HAZARDS, _CODEGEN, _OPS, _PREPARE, _GATE)),
    Private("torch._ops.OpOverloadPacket", TORCH, (_OPS,)),
    Private("torch._ops.HigherOrderOperator", TORCH, (_OPS, _PREPARE)),
    Private("torch._ops.OpOverload._schema", TORCH, (_LOWER, _OPS, _HAZARDS)),
    Private("torch._ops.OpOverload._overloadpacket", TORCH, (_HAZARDS,)),
    Private("torch._ops.OpOverload._boxed_arg_indices", TORCH, (_CODEGEN,), releases=("2.15",), how=OPTIONAL,
            note="set on a few targets only; torch 2.15's generator boxes those arguments, fxcut's leaves such a "
                 "target to torch's"),
    Private("torch.ops.aten._to_copy", TORCH, (_LOWER, _OPS)),
    Private("torch.ops.aten._assert_scalar", TORCH, (_LOWER, _VERSIONS)),
    Private("torch.ops._c10d_functional.wait_tensor", TORCH, (_EXTRACT,)),
    Private("torch._higher_order_ops.auto_functionalize.get_mutable_args", TORCH, (_OPS,)),
    *_rows(TORCH, (_OPS,), "torch._library.utils.is_builtin", "torch._library.utils.is_impure"),
    Private("torch._library.fake_class_registry.FakeScriptObject", TORCH, (_LOWER, _EXTRACT)),
    Private("torch.UntypedStorage._cdata", TORCH, (_BUDGET, _PREPARE, _PY_PREPARE),
            note="a storage's identity, as StorageWeakRef compares storages"),
    Private("torch.Tensor._has_symbolic_sizes_strides", TORCH, (_EXTRACT,)),
    Private("torch.utils._ordered_set.OrderedSet", TORCH, (_BUILD, _BUDGET)),
    # the plan on inductor's memory model (opt-in: memory_model="inductor"): inductor's own tables and its
    # lowering, scheduler and wrapper code asked on fake tensors (fxcut.torchrules.fusion / .inductor)
    *_rows(TORCH, (_FUSION,), "torch._inductor.config", "torch._inductor.inductor_prims", "torch._inductor.lowering",
           "torch._inductor.lowering.lowerings", "torch._inductor.lowering.needs_realized_inputs",
           "torch._prims_common.is_expandable_to", "torch._ops.OpOverload", "torch._ops.OpOverloadPacket",
           *(f"torch.ops.aten.{op}" for op in (
               "_addmm_activation", "_int_mm", "_log_softmax", "_log_softmax_backward_data",
               "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
               "_native_batch_norm_legit_no_training", "_scaled_mm", "_softmax", "_softmax_backward_data",
               "_unsafe_index_put", "_unsafe_masked_index_put_accumulate")),
           when=_INDUCTOR_PLAN),
    *_rows(TORCH, (_INDUCTOR,), "torch._inductor.compile_fx._recursive_post_grad_passes",
           "torch._inductor.debug.DebugContext", "torch._inductor.fx_passes.post_grad.view_to_reshape",
           "torch._inductor.graph.GraphLowering", "torch._inductor.graph.GraphLowering._update_scheduler",
           "torch._inductor.ir", "torch._inductor.ir.MultiOutputLayout", "torch._inductor.ir.NoneLayout",
           "torch._inductor.memory", "torch._inductor.memory.assign_memory_planning_info_for_scheduler_buffers",
           "torch._inductor.memory.estimate_peak_memory", "torch._inductor.memory.get_freeable_input_buf",
           "torch._inductor.utils.get_dtype_size", "torch._inductor.virtualized.V",
           "torch._inductor.virtualized.V.set_fake_mode", "torch._inductor.virtualized.V.set_graph_handler",
           when=_INDUCTOR_PLAN),
    Private("torch.utils._ordered_set.OrderedSet", TORCH, (_INDUCTOR, _ASK), when=_INDUCTOR_PLAN),
    # the check's modules of a graph with dynamic shapes, static at the traced sizes on a fake mode and a
    # tracing context of their own (fxcut.torchrules.ask.at_traced_sizes)
    *_rows(TORCH, (_ASK,), "torch._guards.TracingContext", "torch._guards.tracing",
           "torch._subclasses.fake_tensor.FakeTensorMode", "torch._subclasses.fake_tensor.unset_fake_temporarily",
           "torch.fx.passes.shape_prop._extract_tensor_metadata", when=_INDUCTOR_PLAN),
    # the check's code generation without vectorized C++ kernels (its simdlen option, patched while it runs)
    *_rows(TORCH, (_INDUCTOR,), "torch._inductor.config", "torch._inductor.config.patch",
           "torch._inductor.config.cpp.simdlen", when=_INDUCTOR_PLAN),
    Private("torch.utils._pytree.arg_tree_leaves", TORCH, (_LOWER, _PREPARE)),
    Private("torch.utils._pytree.tree_is_leaf", TORCH, (_PREPARE,)),
    *_rows(TORCH, (_PREPARE, _GATE), "torch.utils._pytree.tree_flatten", "torch.utils._pytree.TreeSpec._children"),
    Private("torch.fx.traceback._get_memory_budget_annotation", TORCH, (_BUDGET,),
            releases=("2.13", *_FROM_214), note="region budgets (Rules.region_memory_budgets)"),
    Private("torch.fx.experimental._backward_state.BackwardState", TORCH_FX, (_LOWER, _EXTRACT)),
    # torch.fx: its code generator, name table, graphs and nodes
    *_rows(TORCH_FX, (_CODEGEN, _PREPARE), "torch.fx.graph._illegal_names", "torch.fx.graph._name_regex"),
    Private("torch.fx.graph._is_from_torch", TORCH_FX, (_CODEGEN,)),
    Private("torch.fx.node._get_qualified_name", TORCH_FX, (_CODEGEN,)),
    *_rows(TORCH_FX, (_CODEGEN,), "torch.fx.graph.PythonCode._lineno_map", "torch.fx.graph.PythonCode._prologue_start",
           note="keywords of PythonCode's constructor; the code generator's self-check compares them too"),
    Private("torch.fx.graph.CodeGen._body_transformer", TORCH_FX, (_CODEGEN,),
            note="an on_generate_code transformer: such a graph's code is torch's generator's"),
    Private("torch.fx.Graph._python_code", TORCH_FX, (_CODEGEN,),
            note="a Graph class that overrides it generates its own code: torch's generator writes it"),
    Private("torch.fx.graph._Namespace", TORCH_FX, (_PREPARE, _GATE)),
    *_rows(TORCH_FX, (_PREPARE,), "torch.fx.graph._Namespace._used_names", "torch.fx.graph._Namespace._base_count"),
    Private("torch.fx._lazy_graph_module._LazyGraphModule", TORCH_FX, (_SNAPSHOT,)),
    Private("torch.fx._lazy_graph_module._make_graph_module", TORCH_FX, (_EXTRACT,)),
    Private("torch.fx.Graph._codegen", TORCH_FX, (_CODEGEN, _PREPARE, _SNAPSHOT, _GATE)),
    *_rows(TORCH_FX, (_PREPARE, _SNAPSHOT), "torch.fx.Graph._tracer_cls"),
    *_rows(TORCH_FX, (_PREPARE,), "torch.fx.Graph._tracer_extras", "torch.fx.Graph._co_fields"),
    Private("torch.fx.Graph._graph_namespace", TORCH_FX, (_EXTRACT, _PREPARE, _GATE)),
    *_rows(TORCH_FX, (_EXTRACT,), "torch.fx.Graph._find_nodes_lookup_table", "torch.fx.Graph._len",
           "torch.fx.Graph._insert", "torch.fx.Node._update_args_kwargs"),
    Private("torch.fx.Node._input_nodes", TORCH_FX, (_LOWER, _CODEGEN, _EXTRACT, _PY_LOWER, _PY_PREPARE), how=NODE_SLOT,
            note="the dict of a node's input nodes (all_input_nodes lists its keys)"),
    Private("torch.fx.Node._args", TORCH_FX, (_PY_LOWER, _PY_PREPARE), how=NODE_SLOT),
    Private("torch.fx.Node._kwargs", TORCH_FX, (_PY_PREPARE,), how=NODE_SLOT),
    *_rows(TORCH_FX, (_PY_LOWER,), "torch.fx.Node.op", "torch.fx.Node.target", "torch.fx.Node.meta", how=NODE_SLOT,
           note="public, but read at its member offset: a layout"),
    # C-level layouts the readers rely on
    Private("CPython tuple hash (Objects/tupleobject.c, xxHash)", CPYTHON, (_PY_CSE, _PY_PREPARE), how=LAYOUT,
            note="CSE keys hashed without building their tuples; checked against the interpreter's hash on "
                 "every prepare_plan call, which builds the tuples where it differs"),
    Private("CPython PyDictObject.ma_keys", CPYTHON, (_PY_LOWER,), how=LAYOUT,
            note="a prefetch hint only, compiled against this interpreter's headers"),
    Private("CPython PyMemberDef of a member descriptor", CPYTHON, (_PY_LOWER,), how=LAYOUT,
            note="a node slot's offset, taken only from an object member of torch._C._NodeBase that lies inside "
                 "the node; anything else is read by name"),
    Private("torch THPVariable: the TensorImpl pointer after the object header", TORCH, (_PY_LOWER,), how=LAYOUT,
            note="a prefetch hint only, read inside the object's size and never dereferenced"),
    # what fxcut decided, reported: an artifact in torch's structured trace and the compile's id
    Private("torch._logging.trace_structured", TORCH, (_TRACE,), how=OPTIONAL,
            note="the fxcut_partition artifact of TORCH_TRACE; absent: nothing traced, no partition changes"),
    Private("torch._guards.CompileContext", TORCH, (_TRACE,), how=OPTIONAL,
            note="current_compile_id() for fxcut.last_plans() and the log; absent: no compile id reported"),
    Private("DeepSpeed partitioner._num_fwd_outputs_by_frame", DEEPSPEED, (_DEEPSPEED,), how=OPTIONAL,
            note="read with a default; absent on DeepSpeed releases without it"),
]


def _from_fx_internals() -> list[Private]:
    """The snapshot's private torch.fx attributes (:class:`FxInternals`, per
    release) as rows: the fields it saves by value may be absent (absent
    ones stay absent); the internals it rebuilds must exist."""
    owners = (("module_fields", "torch.fx.GraphModule", OPTIONAL), ("graph_fields", "torch.fx.Graph", OPTIONAL),
              ("graph_internals", "torch.fx.Graph", ATTRIBUTE), ("node_internals", "torch.fx.Node", ATTRIBUTE))
    releases: dict[tuple[str, str], list[str]] = {}
    for rules in RELEASES.values():
        for group, owner, how in owners:
            for name in getattr(rules.fx_internals, group):
                releases.setdefault((f"{owner}.{name}", how), []).append(rules.release)
    notes = {OPTIONAL: "saved by value, absent ones stay absent (FxInternals)",
             ATTRIBUTE: "rebuilt or called by the restore (FxInternals)"}
    return [Private(name, TORCH_FX, (_SNAPSHOT,), None if len(rs) == len(RELEASES) else tuple(rs), how,
                    note=notes[how]) for (name, how), rs in releases.items()]


def _merged(rows: list[Private]) -> tuple[Private, ...]:
    """One row per name: the users of every row of that name, the stricter
    check (a name some user needs is not optional)."""
    merged: dict[str, Private] = {}
    for row in rows:
        old = merged.get(row.name)
        if old is None:
            merged[row.name] = row
            continue
        how = old.how if old.how != OPTIONAL else row.how
        releases = None if old.releases is None or row.releases is None else tuple(
            dict.fromkeys(old.releases + row.releases))
        merged[row.name] = replace(old, users=tuple(dict.fromkeys(old.users + row.users)), how=how,
                                   releases=releases, when=old.when and row.when, note=old.note or row.note)
    return tuple(merged.values())


#: Every private torch, torch.fx and CPython name or layout fxcut's library
#: relies on (its tooling, ``fxcut.tools``, aside), one row each, with the
#: modules that rely on it.  tests/test_compat_gate.py keeps it honest both
#: ways, on every supported release: each row resolves as its ``how`` says,
#: and a scan of the package's source (and of the C readers' attribute
#: names) finds no private name the table does not list.
#: :mod:`fxcut.torchrules.gate` checks the rows once per process, at the
#: first partition.
PRIVATE_NAMES: tuple[Private, ...] = _merged(_LISTED + _from_fx_internals())


def is_assert_only_symbool(node: Any) -> bool:
    """A SymBool whose only users are ``aten._assert_scalar``: never saved
    (every supported release drops these from the saved sym nodes)."""
    users = node.users
    return (
        isinstance(node.meta.get("val"), torch.SymBool)
        and len(users) > 0
        and all(u.target is torch.ops.aten._assert_scalar.default for u in users)
    )


__all__ = [
    "ALLOW_UNTESTED_ENV",
    "ATTRIBUTE",
    "CPYTHON",
    "DEEPSPEED",
    "LAYOUT",
    "NODE_SLOT",
    "OPTIONAL",
    "PRIVATE_NAMES",
    "Private",
    "TORCH",
    "TORCH_FX",
    "NEWEST",
    "OLDEST",
    "RELEASES",
    "Rules",
    "TESTED",
    "current",
    "installed_version",
    "is_assert_only_symbool",
    "parse",
    "rules_for",
    "rules_or_nearest",
    "running",
    "tested_range",
]

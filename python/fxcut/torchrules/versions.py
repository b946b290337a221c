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

The tested range: :data:`TESTED` holds the exact releases CI runs the
fidelity suite on.  A torch outside [oldest, newest] -- older, newer, or a
nightly -- is *untested*: :mod:`fxcut.route.guard` hands such graphs to torch's
own partitioner (:mod:`fxcut.route.guard`).

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
    """The rules of ``version`` when it lies in the tested range, else None."""
    parsed = parse(version)
    if parsed is None or not parse(OLDEST) <= parsed <= parse(NEWEST):  # type: ignore[operator]
        return None
    return RELEASES.get(f"{parsed[0]}.{parsed[1]}")


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
    return f"{OLDEST} to {NEWEST} (tested: {', '.join(TESTED)})"


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

"""The one door into ``torchrules``: everything fxcut asks of torch, gated.

A partition call's guard (:mod:`fxcut.route.guard`) looks the running
torch's :class:`~fxcut.torchrules.versions.Rules` up once and builds one
:class:`TorchAdapter` from them; every step below it -- the plan, lowering,
the decision's inputs, the build, the plan's facts and its check -- asks
this object, and nothing else of ``torchrules`` (tests/test_package_shape.py
checks that the route, the entry modules and the integrations import only
this module, the gate's exception and warning classes, and the versions
table).

Every method that runs a copy of torch's behaviour is **gated**
(:func:`fxcut.torchrules.gate.gated`): any exception inside it that is not
fxcut's own bad-input error becomes :class:`~fxcut.torchrules.gate.TorchChanged`,
which the guard answers by restoring the graph and handing it to torch's
own partitioner with one :class:`~fxcut.torchrules.gate.FallbackWarning`.
A newer torch whose private code changed can make fxcut slower; it cannot
make a compile fail or differ.  The methods that read user input (the
graph's nodes, the config's values) raise fxcut's named errors before any
copy runs.  Callbacks handed to the solvers (the budget pass's runtimes and
knapsack, the plan's asks) are gated the same way.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import torch.fx as fx

from ..solve.budget import BudgetInputs, KnapsackFn
from ..solve.core import Decision, MinCutOptions
from ..solve.hazards import Unsafe
from ..solve.knapsack import KnapsackChoice
from ..solve.memory import InductorModel, ModelInputs, check_memory_model
from . import (ask, budget, build, facts, features, hazards, lower, options, prepare, snapshot, trace, validate,
               versions, zero3)
from .budget import Estimator, RegionBudgetError, RuntimeEstimates, Solver
from .gate import (BUDGET_RULES, CONFIG, DCE_CSE_PLAN, FEATURE_SCAN, INDUCTOR_LOWERING, INDUCTOR_TABLES,
                   MODULE_BUILDER, NODE_FACTS, NODE_READERS, SNAPSHOT, STRUCTURED_TRACE, ZERO3_WALK, BadInput, gated)
from .lower import LoweredGraph, LoweringError
from .ops import TargetFacts, dce_impure_random, default_facts, get_no_copy_ops, is_cast_op
from .prepare import Preparation
from .snapshot import ModuleSnapshot
from .versions import Rules

P = ParamSpec("P")
R = TypeVar("R")

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


def _gate(copy: str, fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` gated as a copy named ``copy`` (for callbacks made per call)."""
    return gated(copy)(fn)


class TorchAdapter:
    """torch as one partition call sees it: the running release's ``rules``
    (the nearest release's on an untested torch run anyway), the op facts
    cache and how dead-code elimination treats random ops, read once."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.facts: TargetFacts = default_facts()
        self.impure_random: bool = dce_impure_random()

    def __repr__(self) -> str:
        return f"TorchAdapter(torch {self.rules.release})"

    # ----------------------------------------------------------------- the call, checked (user input)

    def check_graph(self, graph: fx.Graph) -> None:
        """The joint graph's nodes checked before any copy reads them
        (:func:`fxcut.torchrules.validate.check_nodes`): fxcut's named errors."""
        validate.check_nodes(graph)

    @gated(CONFIG, passes=(TypeError, ValueError))
    def config(self, name: str) -> Any:
        """``torch._functorch.config.<name>`` as the release reads it."""
        return self.rules.config(name)

    @gated(CONFIG, passes=(TypeError, ValueError))
    def options(self) -> MinCutOptions:
        """The decision's options from torch's config, now (a config value
        of the wrong type or range: fxcut's TypeError / ValueError)."""
        return options.min_cut_options(self.rules)

    @gated(CONFIG, passes=(ValueError,))
    def resolve_budget(self, joint_module: fx.GraphModule) -> tuple[float, list[float], list[fx.Node]]:
        """The memory budget the graph asks for, with its region values and
        unannotated nodes (:func:`fxcut.torchrules.validate.resolve_budget`)."""
        return validate.resolve_budget(joint_module, self.rules)

    @gated(CONFIG, passes=(ValueError,))
    def check_budget_settings(self, solver: object, estimator: object) -> None:
        """A knapsack solver and runtime estimator torch knows (ValueError naming it)."""
        budget.check_solver(solver)
        budget.check_estimator(estimator)

    @gated(CONFIG, passes=(ImportError,))
    def check_offloading(self) -> None:
        """torch's activation offloading pass imports (it runs in the build)."""
        if self.rules.config("enable_activation_offloading"):
            build.offloading_pass(self.rules)

    @gated(FEATURE_SCAN)
    def unmodelled_feature(self, joint_module: fx.GraphModule) -> str | None:
        """Why fxcut cannot decide this graph as the running torch would, or None."""
        return features.unmodelled_feature(joint_module, self.rules)

    # ----------------------------------------------------------------- the graph, read

    @gated(DCE_CSE_PLAN)
    def prepare(self, graph: fx.Graph, num_fwd_outputs: int) -> Preparation:
        """torch's dead-code elimination and CSE, planned (nothing written)."""
        return prepare.plan(graph, self.facts, cse=bool(self.rules.config("cse")), impure_random=self.impure_random,
                            rules=self.rules, num_fwd_outputs=num_fwd_outputs)

    @gated(NODE_READERS)
    def lower(self, graph: fx.Graph, prep: Preparation | None = None) -> LoweredGraph:
        """The graph array of ``graph`` as ``prep`` will leave it (as it is
        when None); a node that cannot be lowered: :class:`LoweringError`."""
        if prep is None:
            return lower.lower_for_partition(graph, self.facts, impure_random=self.impure_random, rules=self.rules)
        return lower.lower_prepared(graph, prep, self.facts, impure_random=self.impure_random, rules=self.rules)

    @gated(NODE_FACTS)
    def unsafe(self, lowered: LoweredGraph) -> Unsafe:
        """Random draws and reads of mutated state (:mod:`fxcut.solve.hazards`)."""
        return hazards.unsafe(lowered, self.facts)

    @gated(NODE_FACTS)
    def seeded(self, lowered: LoweredGraph) -> bytes:
        """1 per call of an op tagged ``nondeterministic_seeded``."""
        return hazards.seeded(lowered)

    def model_inputs(self, lowered: LoweredGraph, model: str = "unfused",
                     estimates: RuntimeEstimates | None = None, *, with_flops: bool = True) -> ModelInputs:
        """What the memory model (``model``: one of
        :data:`fxcut.solve.memory.MEMORY_MODELS`) reads of ``lowered`` (:mod:`fxcut.torchrules.facts`); ``with_flops``
        False: every node's cost 0 (what a memory figure alone needs).  An
        unknown ``model``: a ValueError naming it, before any copy runs."""
        check_memory_model(model)
        return self._model_inputs(lowered, model, estimates, with_flops)

    @gated(NODE_FACTS)
    def _model_inputs(self, lowered: LoweredGraph, model: str, estimates: RuntimeEstimates | None,
                      with_flops: bool) -> ModelInputs:
        inductor = self.inductor_model(lowered) if model == "inductor" else None
        flops = facts.node_flops(lowered, estimates) if with_flops else array("q", bytes(8 * len(lowered)))
        return ModelInputs(facts.storage_of(lowered), flops, facts.extraction_marks(lowered), inductor,
                           hold_saved=model == "unfused_held", workspace=facts.model_workspace(lowered, model))

    @gated(INDUCTOR_TABLES)
    def inductor_model(self, lowered: LoweredGraph) -> InductorModel:
        """The inductor model's kinds, spaces and thresholds for ``lowered``."""
        return facts.inductor_model(lowered, self.rules)

    @gated(NODE_FACTS)
    def value_numel(self, lowered: LoweredGraph) -> Any:
        """Per node, the elements its value holds."""
        return facts.value_numel(lowered)

    @gated(NODE_FACTS)
    def device(self, lowered: LoweredGraph) -> str:
        """The device type the graph runs on."""
        return facts.graph_device(lowered)

    @gated(NODE_FACTS)
    def region_budget_of(self, lowered: LoweredGraph) -> list[float | None]:
        """Per node, its region budget annotation (None: none)."""
        return budget.region_budget_of(lowered.nodes, self.rules)

    # ----------------------------------------------------------------- the budget pass

    def runtime_estimates(self, estimator: Estimator) -> RuntimeEstimates:
        """A runtime cache under ``estimator`` (checked by the caller)."""
        return RuntimeEstimates(estimator)

    def budget_inputs(self, lowered: LoweredGraph, graph: fx.Graph, *, solver: Solver,
                      estimates: RuntimeEstimates, static_lifetime_input_indices: Sequence[int]) -> BudgetInputs:
        """The budget pass's inputs for ``lowered``, its callbacks gated."""
        made = budget.budget_inputs(lowered, graph, self.rules, solver=solver, estimates=estimates,
                                    static_lifetime_input_indices=static_lifetime_input_indices)
        solver_fn: str | KnapsackFn = made.solver if isinstance(made.solver, str) else _gate(BUDGET_RULES,
                                                                                            made.solver)
        return BudgetInputs(solver_fn, _gate(BUDGET_RULES, made.runtimes), _gate(BUDGET_RULES, made.input_storage),
                            made.no_candidates_saves_aggressive_cut)

    @gated(CONFIG, passes=(RegionBudgetError,))
    def check_regions(self, values: list[float], unannotated: list[fx.Node], decision: Decision[LoweredGraph],
                      graph: fx.Graph) -> None:
        """torch's rules for region budgets, once the forward is classified
        (``decision``: a budget-0 classification of ``graph``)."""
        import fxcut._C as _C

        lowered = decision.arrays
        fw = decision.node_class
        budget.check_regions(
            values, unannotated,
            lambda n: n.graph is not graph or (n in lowered.index and n.op == "call_function"
                                               and bool(fw[lowered.index[n]] & _C.C_REQUIRED_FW)),
            self.rules)

    # ----------------------------------------------------------------- writing and building

    @gated(SNAPSHOT)
    def snapshot(self, module: fx.GraphModule) -> ModuleSnapshot:
        """The state of ``module`` (and every GraphModule under it), restorable."""
        return ModuleSnapshot(module, self.rules.fx_internals)

    @gated(SNAPSHOT)
    def copy(self, module: fx.GraphModule) -> fx.GraphModule:
        """An independent copy of ``module`` (same names, own meta dicts)."""
        return snapshot.copy_graph_module(module)

    @gated(DCE_CSE_PLAN)
    def apply_preparation(self, joint_module: fx.GraphModule, prep: Preparation, lowered: LoweredGraph) -> None:
        """The planned DCE/CSE applied in place; a graph that does not end as
        planned (:class:`~fxcut.torchrules.prepare.PreparationMismatch`) is a
        gap like any other: torch decides it."""
        prepare.apply(joint_module, prep, lowered.nodes)

    @gated(MODULE_BUILDER)
    def write_back_tags(self, lowered: LoweredGraph, decision: Decision[Any]) -> None:
        """The tags the core's passes changed, written as torch's passes write them."""
        build.write_back_tags(lowered, decision)

    @gated(MODULE_BUILDER)
    def recomputable_rng(self, lowered: LoweredGraph) -> tuple[bool, bool]:
        """(tagged to be recomputed, one of them an RNG op), read before the passes."""
        return build.recomputable_rng(lowered, self.rules)

    @gated(MODULE_BUILDER)
    def default_partition(self, joint_module: fx.GraphModule, joint_inputs: Any, num_fwd_outputs: int,
                          static_indices: list[int]) -> PartitionResult:
        """torch's ``default_partition``: a graph without a backward."""
        return build.default_partition(joint_module, joint_inputs, num_fwd_outputs, static_indices)

    @gated(MODULE_BUILDER)
    def build_modules(self, joint_module: fx.GraphModule, saved: list[fx.Node], num_fwd_outputs: int,
                      static_indices: Sequence[int], recomputable: tuple[bool, bool]) -> PartitionResult:
        """The forward and backward modules from the saved values (synced
        across ranks where the config asks)."""
        saved = build.sync_cross_ranks(joint_module, saved, self.rules)
        return build.build_modules(joint_module, saved, num_fwd_outputs, static_indices, recomputable, self.rules,
                                   impure_random=self.impure_random)

    # ----------------------------------------------------------------- the plan's check

    @gated(NODE_FACTS)
    def unaskable(self, joint_module: fx.GraphModule) -> str:
        """Why inductor may not be asked about this graph ("": it may): an
        input's size has no traced value to ask at (a graph with dynamic
        shapes is otherwise asked at its traced sizes, on modules of its
        own: :func:`fxcut.torchrules.ask.at_traced_sizes`)."""
        return ask.untraced_sizes(joint_module)

    @gated(INDUCTOR_LOWERING)
    def holds_saved_tensors(self, joint_module: fx.GraphModule) -> bool:
        """Whether the step runs other work while the graph's saved tensors live."""
        return ask.holds_saved_tensors(joint_module)

    def inductor_asker(self, joint_module: fx.GraphModule, prep: Preparation | None, lowered: LoweredGraph,
                       num_fwd_outputs: int) -> Callable[[Sequence[int]], tuple[int, int]]:
        """A gated function: the saved node indices of ``lowered`` -> the
        forward and backward peaks inductor's code allocates."""
        rules = self.rules

        def peaks(saved: Sequence[int]) -> tuple[int, int]:
            return ask.decision_peaks(joint_module, prep, lowered.nodes, saved, num_fwd_outputs, rules)

        return _gate(INDUCTOR_LOWERING, peaks)

    # ----------------------------------------------------------------- what fxcut decided, reported

    @gated(STRUCTURED_TRACE)
    def trace_partition(self, payload_fn: Callable[[], str]) -> bool:
        """One ``fxcut_partition`` artifact in torch's structured trace
        (:mod:`fxcut.torchrules.trace`; ``payload_fn`` called only when the
        trace is on).  The caller catches what fails: a report never
        changes a partition."""
        return trace.artifact(payload_fn)

    @gated(STRUCTURED_TRACE)
    def compile_id(self) -> str | None:
        """torch's id of the compile running now ("0/0"), or None."""
        return trace.compile_id()

    # ----------------------------------------------------------------- DeepCompile's ZeRO-3 walk

    @gated(ZERO3_WALK, passes=(TypeError, ValueError, IndexError))
    def zero3_walk(self, joint_graph: fx.Graph, positions: Sequence[int], no_copy_ops: Any = None) -> list[fx.Node]:
        """DeepCompile's ZeRO-3 walk in C (:mod:`fxcut.torchrules.zero3`):
        the tagged nodes, in graph order."""
        return zero3.c_walk(joint_graph, positions, no_copy_ops)


def primal_placeholders(graph: fx.Graph) -> list[fx.Node]:
    """The graph's primal placeholders, in order (the placeholders that are
    neither tangents nor RNG seeds: AOT Autograd's naming, as lowering reads it)."""
    import fxcut._C as _C

    return [n for n in graph.nodes if n.op == "placeholder" and lower.placeholder_flags(n) & _C.F_PRIMAL]


def running_torch() -> tuple[TorchAdapter, bool]:
    """The running torch as fxcut asks it -- its release's rules looked up
    (the one lookup a partition call makes: its guard), the nearest
    release's on an untested torch -- and whether that torch is tested."""
    rules, tested = versions.running()
    return TorchAdapter(rules), tested


def reference_zero3_walk(joint_graph: fx.Graph, positions: Sequence[int], no_copy_ops: Any = None) -> list[fx.Node]:
    """DeepCompile's ZeRO-3 walk in plain Python, for torch's own path (an
    untested torch, or a gap in fxcut's walk)."""
    return zero3.reference_walk(joint_graph, positions, no_copy_ops)


__all__ = ["BadInput", "KnapsackChoice", "LoweredGraph", "LoweringError", "ModuleSnapshot", "PartitionResult",
           "Preparation", "RegionBudgetError", "RuntimeEstimates", "Solver", "Estimator", "TorchAdapter",
           "get_no_copy_ops", "is_cast_op", "primal_placeholders", "reference_zero3_walk", "running_torch"]

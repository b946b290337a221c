"""What the memory model and the plan read of a graph beyond its array, read from torch.

The solvers take per-node arrays (:mod:`fxcut.solve.memory`,
:mod:`fxcut.solve.cost`, :mod:`fxcut.solve.planner`); this module is where
they come from, for a :class:`~fxcut.torchrules.lower.LoweredGraph`:

- :func:`storage_of`: which values share a storage (``meta["val"]``
  storages compared, as torch's partitioner compares them);
- :func:`node_flops`: what running each node costs under torch's
  ``"flops"`` estimator;
- :func:`extraction_marks`: what torch's module extraction knows of each
  node beyond the graph array;
- :func:`value_numel`: the elements each value holds;
- :func:`graph_device`: the device the graph runs on;
- :func:`inductor_model`: the inductor model's kinds, iteration spaces and
  thresholds (:mod:`fxcut.torchrules.fusion`, inductor's own tables);

and :func:`model_inputs` bundles what the memory model reads.
"""

from __future__ import annotations

import operator
from array import array
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

import fxcut._C as _C
from ..solve.memory import InductorModel, ModelInputs
from .budget import RuntimeEstimates
from .extract import placement_rules
from .fusion import fusion_kinds, iteration_spaces, layout_optimisation, realize_thresholds
from .kernels import workspace as kernel_workspace
from .lower import LoweredGraph
from .ops import tensor_nbytes
from .versions import Rules


def _ref(t: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(t.untyped_storage())  # type: ignore[no-untyped-call]


def _storages(val: Any) -> list[StorageWeakRef] | None:
    """The storages a value holds: one for a tensor, one per tensor of a
    sequence; None for anything else (or a tensor without a storage)."""
    try:
        if isinstance(val, torch.Tensor):
            return [_ref(val)]
        if isinstance(val, (list, tuple)):
            return [_ref(x) for x in val if isinstance(x, torch.Tensor)]
    except (NotImplementedError, RuntimeError):  # sparse / nested / functional wrappers
        return None
    return None


def storage_of(arrays: LoweredGraph) -> array[int]:
    """Per node, the earliest node whose value's storage it shares (``meta["val"]``
    storages compared, as torch's partitioner compares them), itself when its
    storage is its own.  A sequence (a multi-output op) shares a storage only
    when all its tensors live on one earlier storage (``split`` of a value);
    otherwise it owns, and its getitems own their tensors' storages."""
    owner: dict[StorageWeakRef, int] = {}
    out = array("i", range(len(arrays)))
    for i, node in enumerate(arrays.nodes):
        val = node.meta.get("val")
        refs = _storages(val)
        if not refs:
            continue
        if isinstance(val, torch.Tensor):
            j = owner.setdefault(refs[0], i)
            out[i] = j
            continue
        owners = {owner.get(r, -1) for r in refs}
        if len(owners) == 1 and -1 not in owners:
            out[i] = owners.pop()
    return out


def node_flops(arrays: LoweredGraph, estimates: RuntimeEstimates | None = None) -> array[int]:
    """Per node, the cost torch's knapsack gives running it once under its
    ``"flops"`` estimator (``torch.utils.flop_counter``; at least 1 for an
    op, as torch counts it), through :class:`fxcut.torchrules.budget.RuntimeEstimates`
    (memoised per op signature); 0 for placeholders, get_attr, getitems, the
    output, and an op the estimator cannot replay on its fake values (its
    exception swallowed: torch's knapsack never asks those).  ``estimates``:
    a cache to share, used when its estimator is ``"flops"``."""
    est = estimates if estimates is not None and estimates.estimator == "flops" else RuntimeEstimates("flops")
    out = array("q", bytes(8 * len(arrays)))
    for i, node in enumerate(arrays.nodes):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        try:
            (value,) = est([node])
        except Exception:  # an op the flop counter cannot replay (torch's knapsack never asks it)
            value = 0
        out[i] = max(0, int(value))
    return out


def extraction_marks(arrays: LoweredGraph) -> bytes:
    """Per node, what torch's module extraction knows beyond the graph array
    (``_C.X_*`` bits): ``X_MUST_FW`` for ``_must_be_in_forward`` (a mutable
    op not tagged for the backward, or ``partitioner_tag ==
    "must_be_in_forward"``), ``X_COPY`` for ``aten.copy_`` (which the
    backward's reordering emits early)."""
    must_fw, _ = placement_rules(arrays.nodes)
    copy_ = torch.ops.aten.copy_.default
    return bytes((_C.X_MUST_FW if must_fw[n] else 0) | (_C.X_COPY if n.target is copy_ else 0)
                 for n in arrays.nodes)


def _numel(val: object) -> int:
    """Elements of a value (a symbolic count by its hint, as sizes are taken)."""
    if isinstance(val, torch.Tensor):
        return tensor_nbytes(val) // max(1, val.dtype.itemsize)
    if isinstance(val, (list, tuple)):
        return sum(_numel(v) for v in val)
    return 0


def value_numel(arrays: LoweredGraph) -> array[int]:
    """Per node, the elements its value holds (a sequence's: summed; 0 for
    anything but tensors)."""
    return array("q", (_numel(node.meta.get("val")) for node in arrays.nodes))


def graph_device(arrays: LoweredGraph) -> str:
    """The device type of the graph's tensors ("cpu" when none says)."""
    for node in arrays.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device.type
    return "cpu"


def inductor_model(arrays: LoweredGraph, rules: Rules, fused_cost: array[int] | None = None) -> InductorModel:
    """The inductor model's inputs for ``arrays`` on the release of ``rules``."""
    device = graph_device(arrays)
    kinds = fusion_kinds(arrays.nodes, rules, device)
    # inductor's C++ backend runs the kernels between two extern kernels as one call; GPU kernels run one by one
    return InductorModel(kinds, fused_cost, realize_thresholds(device), iteration_spaces(arrays.nodes, kinds),
                         kernel_calls=device == "cpu")


def model_inputs(arrays: LoweredGraph, rules: Rules, model: str = "unfused") -> ModelInputs:
    """What the memory model (``model``: one of
    :data:`fxcut.solve.memory.MEMORY_MODELS`) reads of ``arrays`` besides
    the array: storages, flops, extraction marks, and the inductor model's
    inputs where it is inductor's."""
    inductor = inductor_model(arrays, rules) if model == "inductor" else None
    return ModelInputs(storage_of(arrays), node_flops(arrays), extraction_marks(arrays), inductor,
                       hold_saved=model == "unfused_held", workspace=model_workspace(arrays, model))


def model_workspace(arrays: LoweredGraph, model: str) -> array[int] | None:
    """What each node's kernel holds inside itself under ``model``: the
    kernel table's bytes (:mod:`fxcut.torchrules.kernels`) for the eager
    kernels the unfused models run; under inductor, for the convolutions it
    leaves to aten, in the channels-last layout its layout optimisation
    gives them (counted in a module where that is on; where it is off the
    model's COPIES_INPUTS copies stand for oneDNN's reorders)."""
    device = graph_device(arrays)
    if model == "inductor":
        return kernel_workspace(arrays, device, inductor=True) if layout_optimisation(device) != "never" else None
    return kernel_workspace(arrays, device)


__all__ = ["extraction_marks", "graph_device", "inductor_model", "model_inputs", "model_workspace", "node_flops", "storage_of",
           "value_numel"]

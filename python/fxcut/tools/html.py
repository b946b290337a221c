"""A self-contained HTML page drawing one partition decision.

    page = render_html(routed_decision(fxcut.partition.partition(gm, None, num_fwd_outputs=1).routed),
                       title="mlp")

The decision drawn is a partition's own (:func:`routed_decision` of the route
behind its modules), or, for a graph not partitioned,
:func:`decide_prepared`'s: the partition's decision under one
:class:`fxcut.route.plan.Plan` (the same DCE/CSE, budget and objective),
nothing built.

Every node of the joint graph gets one of five classes (saved, recomputed in
backward, forward only, backward, banned).  Nodes are collapsed into blocks
(a model's outermost numbered layer, from the ``nn_module_stack`` meta, else
fixed-size chunks of graph order); the page draws one box per block with its
counts per class, the cut (one ``.cut`` mark per saved node) and the edges
between blocks, and a click on a block lists and draws its nodes.  A "memory
over time" section draws the memory model's timeline of the decision
(:func:`fxcut.solve.memory.simulate`: live activation bytes at each step of the
forward then the backward) as an inline SVG, with more lines when given
(``baseline``, ``more``: for a memory plan, torch's decisions at the same b
and at its default budget on the same graph), each peak labelled with its
MiB and node inside the plot; round ticks (1, 2 or 5 x 10^k) on both axes,
the phases named, every line stretched to the first line's forward and
backward so that all end at the right edge.  One unit, MiB, on the whole
page; the node count is the CLI's (the output node included).  Inline CSS,
JS and SVG only: the page loads nothing.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
from collections.abc import Sequence
from array import array
from typing import Any

import torch.fx as fx

import fxcut._C as _C
from ..solve.core import Decision
from ..explain import partition_decision
from ..solve.account import placement
from ..torchrules.ops import value_nbytes
from ..solve.memory import MemoryEstimate, TimelineStep, simulate
from ..partition import Routed
from ..route.plan import Plan, make_plan
from ..torchrules.adapter import LoweredGraph, running_torch
from .report import mib

#: The classes, in legend order, with their colours.
CLASSES: dict[str, tuple[str, str]] = {
    "saved": ("#d62728", "saved for backward (the cut)"),
    "recomputed": ("#ff7f0e", "recomputed in backward"),
    "forward": ("#1f77b4", "forward only"),
    "backward": ("#2ca02c", "backward"),
    "banned": ("#7f7f7f", "banned from recomputation (forward)"),
}

#: Graph-order chunk size when no node names a layer.
CHUNK = 200

_LAYER = re.compile(r"^(.*?[.\[]'?(\d+)'?\]?)(?:[.\[]|$)")


def decide_prepared(joint_module: fx.GraphModule, *, num_fwd_outputs: int,
                    static_lifetime_input_indices: list[int] | None = None, plan: Plan | None = None,
                    **_: Any) -> Decision[LoweredGraph]:
    """The partitioner's decision on ``joint_module`` under its ``plan``
    (made from the arguments when None), with the values it saves;
    ``joint_module`` is not modified."""
    if plan is None:
        plan = make_plan(joint_module, running_torch()[0], num_fwd_outputs=num_fwd_outputs,
                         static_lifetime_input_indices=static_lifetime_input_indices)
    chosen, saved = partition_decision(plan)
    return dataclasses.replace(chosen.decision, saved=saved)


def routed_decision(routed: Routed) -> Decision[LoweredGraph]:
    """The decision a partition's route carried out: the core's
    classification with the saved values the modules were built from (the
    plan's objective's where it has one)."""
    return dataclasses.replace(routed.decision.decision, saved=list(routed.saved))


def _infer_num_fwd_outputs(d: Decision[LoweredGraph]) -> int:
    """Leading outputs without the required-in-backward bit are forward outputs."""
    count = 0
    for i in d.arrays.outputs:
        if i >= 0 and d.node_class[i] & _C.C_REQUIRED_BW:
            break
        count += 1
    return count


def classify(d: Decision[LoweredGraph], num_fwd_outputs: int | None = None) -> dict[fx.Node, str]:
    """Each node's class (every node but the output), with explain's placement."""
    nodes = d.arrays.nodes
    has_backward = d.n_required_bw > 0 and any(n.op == "output" for n in nodes)
    if not has_backward:
        return {n: ("banned" if d.banned(i) else "forward") for i, n in enumerate(nodes) if n.op != "output"}
    if num_fwd_outputs is None:
        num_fwd_outputs = _infer_num_fwd_outputs(d)
    saved, forward, backward = placement(d.arrays, d.saved, num_fwd_outputs)
    out: dict[fx.Node, str] = {}
    for i, n in enumerate(nodes):
        if n.op == "output":
            continue
        if i in saved:
            out[n] = "saved"
        elif i in backward and i in forward:
            out[n] = "recomputed"
        elif i in backward:
            out[n] = "backward"
        elif d.banned(i):
            out[n] = "banned"
        else:
            out[n] = "forward"
    return out


def _layer_key(node: fx.Node) -> str | None:
    """The outermost numbered module of the node (e.g. ``L['model'].blocks.3``)."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    for value in stack.values():
        path = value[0] if isinstance(value, tuple) else str(value)
        m = _LAYER.match(str(path))
        if m:
            return m.group(1)
    return None


def blocks_of(nodes: list[fx.Node]) -> list[tuple[str, list[int]]]:
    """Blocks of node positions, in order of first appearance."""
    keys = [_layer_key(n) for n in nodes]
    if not any(keys):
        return [(f"nodes {s}-{min(s + CHUNK, len(nodes)) - 1}", list(range(s, min(s + CHUNK, len(nodes)))))
                for s in range(0, len(nodes), CHUNK)]
    groups: dict[str, list[int]] = {}
    for i, (n, k) in enumerate(zip(nodes, keys)):
        name = k if k else ("inputs" if n.op == "placeholder" else "outside layers")
        groups.setdefault(name, []).append(i)
    return list(groups.items())


def memory_timeline(d: Decision[LoweredGraph], num_fwd_outputs: int | None = None) -> MemoryEstimate | None:
    """The memory model's estimate of decision ``d`` with its timeline
    (:func:`fxcut.solve.memory.simulate`); None for a graph without a backward.
    Recompute FLOPs are not asked for (zero): the page draws bytes only."""
    nodes = d.arrays.nodes
    if not (d.n_required_bw > 0 and any(n.op == "output" for n in nodes)):
        return None
    if num_fwd_outputs is None:
        num_fwd_outputs = _infer_num_fwd_outputs(d)
    inputs = running_torch()[0].model_inputs(d.arrays, with_flops=False)
    return simulate(d.arrays, d.saved, num_fwd_outputs, inputs, timeline=True)


#: Line colours of the memory plot: the page's decision, then the others.
_LINE_COLOURS = ("#1f77b4", "#d62728", "#7f7f7f")

#: The memory plot's size and margins (left, right, top, bottom), in pixels.
_W, _H, _L, _R, _T, _B = 900, 330, 70, 20, 24, 64
#: An upper bound of a peak label's width per character (bold 11px sans-serif).
CHAR_WIDTH = 7.0


def nice_step(span: float, most: int) -> float:
    """The smallest round step -- 1, 2 or 5 x 10^k -- that cuts ``span``
    into at most ``most`` parts."""
    if span <= 0:
        return 1.0
    raw = span / most
    k = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        step = m * 10.0**k
        if step >= raw * (1 - 1e-9):
            return step
    return 10.0 ** (k + 1)  # pragma: no cover - 10 x 10^k always is


def _ticks(top: float, most: int, *, integer: bool = False) -> tuple[float, list[float]]:
    """Round ticks from 0 up to ``top``: the step and the values."""
    step = nice_step(top, most)
    if integer:
        step = max(1.0, step)
    return step, [round(i * step, 12) for i in range(int(top / step + 1e-9) + 1)]


def _decimals(step: float) -> int:
    return max(0, -math.floor(math.log10(step) + 1e-9))


class _Phases:
    """Where each line's steps go on the x axis: the page's line (the first)
    one step per unit, every other line stretched so that its forward and
    its backward span the first line's (all lines end at the right edge)."""

    def __init__(self, first: list[TimelineStep]) -> None:
        self.x0, self.x1 = float(_L), float(_W - _R)
        self.n = len(first)
        self.n_fw = sum(1 for s in first if s.phase == "forward")
        self.xf = self.x0 + (self.x1 - self.x0) * self.n_fw / max(self.n - 1, 1)

    def at(self, k: int) -> float:
        """Step ``k`` of the first line."""
        return self.x0 + (self.x1 - self.x0) * k / max(self.n - 1, 1)

    def mapper(self, tl: list[TimelineStep]) -> Any:
        n, f = len(tl), sum(1 for s in tl if s.phase == "forward")

        def x(k: int) -> float:
            if k <= f:
                return self.x0 + (self.xf - self.x0) * k / max(f, 1)
            return self.xf + (self.x1 - self.xf) * (k - f) / max(n - 1 - f, 1)
        return x


def _axes_svg(lines: list[tuple[str, str, MemoryEstimate]], phases: _Phases, y: Any, top_mib: float) -> list[str]:
    """The plot's frame: the backward's shading, round y ticks in MiB, round
    x ticks in the first line's steps, the phases named below them."""
    esc = html.escape
    x0, x1, bottom = phases.x0, phases.x1, _H - _B
    out = [f"<rect x='{_L}' y='{_T}' width='{x1 - x0}' height='{bottom - _T}' fill='#fff' stroke='#333'/>",
           f"<rect class='phase-band' x='{phases.xf:.1f}' y='{_T}' width='{x1 - phases.xf:.1f}' "
           f"height='{bottom - _T}' fill='#f3f6fa'/>",
           f"<text x='{_L - 6}' y='{_T - 8}' text-anchor='end' fill='#555'>MiB</text>"]
    ystep, yvals = _ticks(top_mib, 6)
    for v in yvals:
        yy = y(v * 2**20)
        out.append(f"<line x1='{x0}' x2='{x1}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='#e4e4e4'/>"
                   f"<text class='y-tick' data-mib='{v:g}' x='{_L - 6}' y='{yy + 4:.1f}' text-anchor='end'>"
                   f"{v:,.{_decimals(ystep)}f}</text>")
    xstep, xvals = _ticks(max(phases.n - 1, 1), 8, integer=True)
    for k in xvals:
        xx = phases.at(int(k))
        out.append(f"<line x1='{xx:.1f}' x2='{xx:.1f}' y1='{bottom}' y2='{bottom + 4}' stroke='#333'/>"
                   f"<text class='x-tick' data-step='{int(k)}' x='{xx:.1f}' y='{bottom + 16}' "
                   f"text-anchor='middle'>{int(k)}</text>")
    for phase, a, b, count in (("forward", x0, phases.xf, phases.n_fw),
                               ("backward", phases.xf, x1, phases.n - phases.n_fw)):
        out.append(f"<text class='phase' data-phase='{phase}' x='{(a + b) / 2:.1f}' y='{bottom + 32}' "
                   f"text-anchor='middle' fill='#555'>{phase} ({count} steps)</text>")
    out.append(f"<text x='{(x0 + x1) / 2:.1f}' y='{_H - 8}' text-anchor='middle'>step of {esc(lines[0][1])}"
               + (" (every other line stretched to the same forward and backward)" if len(lines) > 1 else "")
               + "</text>")
    return out


def label_x(px: float, width: float) -> float:
    """The left edge of a peak's label of ``width`` pixels: right of the
    peak where it fits, else left of it, always inside the plot."""
    lo, hi = _L + 4.0, _W - _R - 4.0 - width
    x = px + 6 if px + 6 + width <= _W - _R - 4 else px - 6 - width
    return max(lo, min(x, hi))


def memory_svg(lines: list[tuple[str, str, MemoryEstimate]]) -> str:
    """An inline SVG of the timelines ``(key, label, estimate)`` in MiB: one
    polyline per line (one point per step, every line from the left edge to
    the right), the forward/backward boundary, round ticks, and each line's
    peak marked and labelled (MiB and node) inside the plot."""
    esc = html.escape
    phases = _Phases(lines[0][2].timeline or [])
    ph = _H - _B - _T
    band = 16 * len(lines) + 10  # the peak labels' band, above every line
    top = max(max(e.peak_bytes for _, _, e in lines), 1) * ph / (ph - band)

    def y(v: float) -> float:
        return _T + ph * (1 - v / top)
    out = [f"<svg id='memory-plot' xmlns='http://www.w3.org/2000/svg' width='{_W}' height='{_H}' "
           f"viewBox='0 0 {_W} {_H}'>", *_axes_svg(lines, phases, y, top / 2**20)]
    for n, (key, label, e) in enumerate(lines):
        tl = e.timeline or []
        x = phases.mapper(tl)
        colour = _LINE_COLOURS[n % len(_LINE_COLOURS)]
        n_fw = sum(1 for s in tl if s.phase == "forward")
        out.append(f"<line class='fw-bw' data-line='{esc(key)}' data-step='{n_fw}' x1='{phases.xf:.1f}' "
                   f"x2='{phases.xf:.1f}' y1='{_T}' y2='{_H - _B}' stroke='#555' stroke-dasharray='5 3'/>")
        points = " ".join(f"{x(k):.1f},{y(s.live_bytes):.1f}" for k, s in enumerate(tl))
        out.append(f"<polyline class='mem-line' data-line='{esc(key)}' data-steps='{len(tl)}' "
                   f"points='{points}' fill='none' stroke='{colour}' stroke-width='1.5'/>")
        at_peak = [k for k, s in enumerate(tl) if s.live_bytes == e.peak_bytes]
        peak_step = next((k for k in at_peak if tl[k].node == e.peak_node), at_peak[0] if at_peak else 0)
        px, py, ly = x(peak_step), y(e.peak_bytes), _T + 14 + 16 * n
        node = e.peak_node or "?"
        text = f"{label}: peak {mib(e.peak_bytes)} at {node} ({e.peak_phase or '?'})"
        lx = label_x(px, CHAR_WIDTH * len(text))
        # the leader runs from below every label to the peak: it crosses no other line's label
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{_T + band - 6:.1f}' y2='{py:.1f}' stroke='{colour}' "
                   f"stroke-dasharray='2 2'/><circle cx='{px:.1f}' cy='{py:.1f}' r='4' fill='{colour}'/>"
                   f"<text class='mem-peak' data-line='{esc(key)}' data-bytes='{e.peak_bytes}' "
                   f"data-node='{esc(node)}' x='{lx:.1f}' y='{ly:.1f}' text-anchor='start' "
                   f"fill='{colour}' font-weight='bold' stroke='#fff' stroke-width='3' paint-order='stroke'>"
                   f"{esc(text)}</text>")
    out.append("</svg>")
    return "".join(out)


def certificate_text(c: dict[str, Any]) -> str:
    """One line on a plan's proof: its peak, the proven lower bound, the gap
    (``c``: :func:`plan_certificate`'s dict)."""
    if c.get("lower_bound_bytes") is None:
        return f"plan peak {mib(c['peak_bytes'])} (solver {c['solver']}: no proven bound)"
    gap = c["gap"] if c["gap"] is not None else float("inf")
    text = (f"plan peak {mib(c['peak_bytes'])}, proven lower bound {mib(c['lower_bound_bytes'])} "
            f"(gap {100 * gap:.1f}%{', optimal' if gap == 0 else ''}; solver {c['solver']})")
    if c.get("recompute_lower_bound") is not None:
        rg = c["recompute_gap"]
        text += (f"; recompute {c['recompute_flops']} FLOPs, proven at least {c['recompute_lower_bound']}"
                 f" under the limit (gap {'unbounded' if rg is None else f'{100 * rg:.1f}%'})")
    return text


def certificate_html(c: dict[str, Any]) -> str:
    gap = c.get("gap")
    data = f" data-gap='{gap:.6f}'" if gap is not None else ""
    return (f"<span class='stat' id='plan-certificate' data-bound='{c.get('lower_bound_bytes')}'{data}>"
            f"{html.escape(certificate_text(c))}</span>")


def plan_certificate(choice: Any) -> dict[str, Any]:
    """What a plan's record (:class:`fxcut.planned.PlanChoice`) proves, as plain data."""
    def finite(x: float | None) -> float | None:  # JSON has no infinity: a bound of 0 under a positive value
        return x if x is None or x != float("inf") else None

    return {"solver": choice.solver, "peak_bytes": choice.peak_bytes, "recompute_flops": choice.recompute_flops,
            "lower_bound_bytes": choice.lower_bound_bytes, "gap": finite(choice.gap),
            "recompute_lower_bound": choice.recompute_lower_bound, "recompute_gap": finite(choice.recompute_gap),
            "proven_optimal": choice.proven_optimal, "from_exact": choice.from_exact}


def render_html(d: Decision[LoweredGraph], *, title: str = "fxcut partition", num_fwd_outputs: int | None = None,
                baseline: MemoryEstimate | None = None, label: str = "fxcut",
                baseline_label: str = "torch default", certificate: dict[str, Any] | None = None,
                more: Sequence[tuple[str, str, MemoryEstimate]] = (), note: str | None = None,
                joint_nodes: int | None = None) -> str:
    """The page for decision ``d`` (see the module's doc).  ``baseline``:
    a second memory timeline (:func:`memory_timeline` of another decision
    on the same graph) drawn with ``d``'s; ``label`` / ``baseline_label``
    name the two lines; ``more``: further lines ``(key, label, estimate)``;
    ``note``: a sentence under the plot.  ``joint_nodes``: the node count
    of the joint graph as traced (the output node included), when the page
    draws it after dead-code elimination and CSE."""
    classes = classify(d, num_fwd_outputs)
    nodes = list(classes)
    pos = {n: i for i, n in enumerate(nodes)}
    blocks = blocks_of(nodes)
    block_of = [0] * len(nodes)
    for b, (_, members) in enumerate(blocks):
        for i in members:
            block_of[i] = b
    data = {
        "classes": {k: v[0] for k, v in CLASSES.items()},
        "nodes": [[n.name, classes[n], block_of[i], str(n.target)] for i, n in enumerate(nodes)],
        "blocks": [name for name, _ in blocks],
        "edges": [[pos[a], pos[n]] for n in nodes for a in n.all_input_nodes if a in pos],
    }
    esc = html.escape
    parts = [
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        _summary_html(d, nodes, classes, certificate, joint_nodes),
        "<div id='legend' class='legend'>",
    ]
    for key, (colour, meaning) in CLASSES.items():
        parts.append(f"<span class='legend-item' data-class='{key}'><i style='background:{colour}'></i>{esc(meaning)}</span>")
    parts.append("<span class='legend-item'><i class='cutmark'></i>cut: one mark per saved node; "
                 "red dashed edges: saved value used in backward</span></div>")
    others = ([("baseline", baseline_label, baseline)] if baseline is not None else []) + list(more)
    parts.append(_memory_section(d, num_fwd_outputs, label, others, note))
    parts.append("<p class='hint'>Click a block to list and draw its nodes.</p>")
    parts.append("<svg id='overview' xmlns='http://www.w3.org/2000/svg'></svg>\n<div id='blocks'>")
    parts.extend(_block_html(d, b, name, [nodes[i] for i in members], classes)
                 for b, (name, members) in enumerate(blocks))
    parts.append("</div>\n<script type='application/json' id='fxcut-data'>")
    parts.append(json.dumps(data).replace("</", "<\\/"))
    parts.append(f"</script>\n<script>{_JS}</script></body></html>\n")
    return "".join(parts)


def _summary_html(d: Decision[LoweredGraph], nodes: list[fx.Node], classes: dict[fx.Node, str],
                  certificate: dict[str, Any] | None, joint_nodes: int | None) -> str:
    """The summary line: the joint graph's nodes, counted as the CLI counts
    them (the output node included), the nodes per class, the saved bytes,
    the cut's value and, for a plan, its certificate."""
    counts = dict.fromkeys(CLASSES, 0)
    for c in classes.values():
        counts[c] += 1
    saved_bytes = 0
    for n in nodes:
        if classes[n] == "saved":
            try:
                saved_bytes += value_nbytes(n)
            except Exception:  # symbolic sizes: leave it out
                pass
    prepared = len(d.arrays.nodes)
    shown = prepared if joint_nodes is None else joint_nodes
    after = f", {prepared} after dead-code elimination and CSE" if shown != prepared else ""
    parts = [
        "<div id='summary'>",
        f"<span class='stat'>joint graph: <b class='count' data-class='nodes'>{shown}</b> nodes "
        f"(the output node included{after}); each but the output:</span>",
        f"<span class='stat'>saved: <b class='count' data-class='saved'>{counts['saved']}</b>"
        f" (<b id='saved-bytes' data-bytes='{saved_bytes}'>{mib(saved_bytes)}</b>)</span>",
        f"<span class='stat'>recomputed: <b class='count' data-class='recomputed'>{counts['recomputed']}</b></span>",
        f"<span class='stat'>forward only: <b class='count' data-class='forward'>{counts['forward']}</b></span>",
        f"<span class='stat'>backward: <b class='count' data-class='backward'>{counts['backward']}</b></span>",
        f"<span class='stat'>banned: <b class='count' data-class='banned'>{counts['banned']}</b></span>",
        f"<span class='stat'>cut value: {d.cut_value}</span>",
        *([certificate_html(certificate)] if certificate is not None else []),
        "</div>\n",
    ]
    return "".join(parts)


def _block_html(d: Decision[LoweredGraph], b: int, name: str, members: list[fx.Node],
                classes: dict[fx.Node, str]) -> str:
    """Block ``b``'s entry: its head (the nodes per class) and its list of
    nodes, drawn when clicked."""
    esc = html.escape
    bc = dict.fromkeys(CLASSES, 0)
    for n in members:
        bc[classes[n]] += 1
    summary = ", ".join(f"{k} {v}" for k, v in bc.items() if v)
    parts = [f"<div class='block' id='block-{b}' data-block='{b}'>"
             f"<div class='block-head' data-block='{b}'>{esc(name)} &mdash; {len(members)} nodes: {summary}</div>"
             f"<div class='block-body' hidden><svg class='detail' xmlns='http://www.w3.org/2000/svg'></svg><ul>"]
    for n in members:
        c = classes[n]
        ban = d.banned(d.arrays.index[n])
        extra = f" title='banned: {esc(ban)}'" if ban else ""
        parts.append(f"<li class='node {c}' data-node='{esc(n.name)}' data-class='{c}'{extra}>"
                     f"{esc(n.name)} <small>{esc(str(n.target))}</small> <em>{c}</em></li>")
    parts.append("</ul></div></div>")
    return "".join(parts)


def _memory_section(d: Decision[LoweredGraph], num_fwd_outputs: int | None, label: str,
                    others: list[tuple[str, str, MemoryEstimate]], note: str | None) -> str:
    """The memory plot of ``d`` (labelled ``label``) and of ``others``."""
    esc = html.escape
    mine = memory_timeline(d, num_fwd_outputs)
    head = "<div id='memory'><h2>memory over time</h2>"
    if mine is None or not mine.timeline:
        return head + "<p class='hint'>No backward: no memory timeline.</p></div>"
    lines = [("fxcut", label, mine), *((k, lab, e) for k, lab, e in others if e.timeline)]
    legend = "".join(f"<span class='legend-item'><i style='background:{_LINE_COLOURS[n % len(_LINE_COLOURS)]}'>"
                     f"</i>{esc(lab)}: peak {esc(mib(e.peak_bytes))} at {esc(e.peak_node or '?')}</span>"
                     for n, (_, lab, e) in enumerate(lines))
    return (head + "<p class='hint'>Live activation bytes (MiB) at each step of the forward then the backward, as "
            "the memory model (fxcut.solve.memory.simulate) runs the modules; dashed: the forward/backward "
            "boundary.</p>" + (f"<p class='hint' id='memory-note'>{esc(note)}</p>" if note else "")
            + f"<div class='legend'>{legend}</div>" + memory_svg(lines) + "</div>")


_CSS = """
body{font:13px sans-serif;margin:1em}
#summary .stat{margin-right:1.5em}
.legend{margin:.6em 0}.legend-item{margin-right:1.2em}
.legend-item i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle;border:1px solid #333}
.legend-item i.cutmark{background:#000;width:3px}
.hint{color:#666}
.block{border:1px solid #ccc;margin:2px 0}
.block-head{cursor:pointer;padding:3px 6px;background:#f4f4f4}
.block-head:hover{background:#e8e8ff}
.block-body ul{columns:3;margin:4px 0}
li.node{list-style:none;padding-left:4px;border-left:6px solid}
li.saved{border-color:#d62728;font-weight:bold}li.recomputed{border-color:#ff7f0e}
li.forward{border-color:#1f77b4}li.backward{border-color:#2ca02c}li.banned{border-color:#7f7f7f}
svg text{font:11px sans-serif}
#overview .blockbox{cursor:pointer}
h2{font-size:15px;margin:.8em 0 .2em}
"""

_JS = r"""
(function(){
var NS='http://www.w3.org/2000/svg';
var D=JSON.parse(document.getElementById('fxcut-data').textContent);
var C=D.classes, N=D.nodes, E=D.edges, order=['saved','recomputed','forward','backward','banned'];
function el(tag,attrs,parent,text){var e=document.createElementNS(NS,tag);
  for(var k in attrs)e.setAttribute(k,attrs[k]); if(text!==undefined)e.textContent=text;
  if(parent)parent.appendChild(e); return e;}
var nb=D.blocks.length, members=[], counts=[];
for(var b=0;b<nb;b++){members.push([]);var c={};order.forEach(function(k){c[k]=0});counts.push(c);}
N.forEach(function(n,i){members[n[2]].push(i);counts[n[2]][n[1]]++;});
function isBw(c){return c==='backward'||c==='recomputed';}
// overview: one box per block, a stacked bar of its classes, one .cut mark per saved node
var ROW=28, X0=230, W=520, EX=X0+W+40, svg=document.getElementById('overview');
svg.setAttribute('width',EX+260); svg.setAttribute('height',nb*ROW+20);
var agg={}, cutAgg={};
E.forEach(function(e){var a=N[e[0]],b=N[e[1]]; if(a[1]==='saved'&&isBw(b[1])){var k=a[2]+','+b[2];cutAgg[k]=(cutAgg[k]||0)+1;}
  else if(a[2]!==b[2]){var k2=a[2]+','+b[2];agg[k2]=(agg[k2]||0)+1;}});
function arc(k,n,cls,col,off){var p=k.split(','),s=+p[0],t=+p[1],y1=10+s*ROW+ROW/2-4,y2=10+t*ROW+ROW/2-4;
  var bend=EX+off+Math.min(200,Math.abs(t-s)*12);
  el('path',{d:'M'+(X0+W)+' '+y1+' C'+bend+' '+y1+' '+bend+' '+y2+' '+(X0+W)+' '+y2,'class':cls,
    fill:'none',stroke:col,'stroke-width':Math.min(4,1+Math.log(n)),'stroke-dasharray':cls==='cut-edge'?'4 2':'',
    opacity:.6},svg);}
for(var k in agg)arc(k,agg[k],'edge','#999',0);
for(var k in cutAgg)arc(k,cutAgg[k],'cut-edge','#d62728',20);
for(var b=0;b<nb;b++){
  var g=el('g',{'class':'blockbox','data-block':b},svg), y=10+b*ROW, total=members[b].length, x=X0;
  el('text',{x:4,y:y+14},g,D.blocks[b].slice(-34)+' ('+total+')');
  el('rect',{x:X0,y:y,width:W,height:ROW-8,fill:'#fff',stroke:'#333'},g);
  order.forEach(function(k){var w=W*counts[b][k]/Math.max(total,1); if(w>0){
    el('rect',{x:x,y:y,width:w,height:ROW-8,fill:C[k],'data-class':k},g).appendChild(
      (function(){var t=document.createElementNS(NS,'title');t.textContent=k+': '+counts[b][k];return t;})());x+=w;}});
  var saved=members[b].filter(function(i){return N[i][1]==='saved';});
  saved.forEach(function(i,j){var cx=X0+W*(j+0.5)/Math.max(saved.length,1);
    var m=el('line',{x1:cx,x2:cx,y1:y-2,y2:y+ROW-6,stroke:'#000','stroke-width':3,'class':'cut','data-node':N[i][0]},g);
    el('title',{},m,N[i][0]+' (saved)');});
  g.addEventListener('click',(function(bb){return function(){toggle(bb);};})(b));
}
// detail: the block's nodes in graph order on a grid, its edges, saved nodes with a thick border
function drawDetail(b){
  var box=document.querySelector('#block-'+b+' svg.detail'); if(box.getAttribute('data-drawn'))return;
  box.setAttribute('data-drawn','1');
  var ms=members[b], cols=Math.max(1,Math.min(12,Math.ceil(Math.sqrt(ms.length*2)))), CW=110, RH=34, at={};
  box.setAttribute('width',cols*CW+20); box.setAttribute('height',Math.ceil(ms.length/cols)*RH+20);
  ms.forEach(function(i,j){at[i]=[10+(j%cols)*CW,10+Math.floor(j/cols)*RH];});
  E.forEach(function(e){var a=at[e[0]],c=at[e[1]]; if(!a||!c)return;
    var cut=N[e[0]][1]==='saved'&&isBw(N[e[1]][1]);
    el('line',{x1:a[0]+50,y1:a[1]+10,x2:c[0]+50,y2:c[1]+10,stroke:cut?'#d62728':'#bbb',
      'stroke-width':cut?2:1,'stroke-dasharray':cut?'4 2':'','class':cut?'cut-edge':'edge'},box);});
  ms.forEach(function(i){var n=N[i],p=at[i],s=n[1]==='saved';
    var r=el('rect',{x:p[0],y:p[1],width:100,height:20,rx:3,fill:C[n[1]],stroke:s?'#000':'#333',
      'stroke-width':s?4:1,'class':'gnode '+n[1],'data-node':n[0],'data-class':n[1]},box);
    el('title',{},r,n[0]+' = '+n[3]+' ['+n[1]+']');
    el('text',{x:p[0]+3,y:p[1]+14,fill:'#fff'},box,n[0].slice(0,15));});
}
function toggle(b){var body=document.querySelector('#block-'+b+' .block-body');
  body.hidden=!body.hidden; if(!body.hidden){drawDetail(b);document.getElementById('block-'+b).scrollIntoView();}}
document.querySelectorAll('.block-head').forEach(function(h){
  h.addEventListener('click',function(){toggle(+h.getAttribute('data-block'));});});
document.body.setAttribute('data-rendered','1');
})();
"""

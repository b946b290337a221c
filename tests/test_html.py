"""The HTML page of a decision: every node classed, the cut drawn, the counts right."""

from __future__ import annotations

import json
import math
import shutil
import os
import subprocess
from collections import Counter
from html.parser import HTMLParser

import pytest
import zoo

import fxcut.tools.cli as cli
from fxcut.tools.html import CLASSES, decide_prepared, render_html
from placement import BACKWARD, FORWARD, RECOMPUTED, SAVED, graph_state, partition_placement


class _Page(HTMLParser):
    """The page's node elements, counts, legend and cut marks."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.legend: set[str] = set()
        self.cut: list[str] = []
        self.blocks = 0
        self._count: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "li" and "node" in classes:
            self.nodes[a["data-node"]] = a["data-class"]
        if "count" in classes:
            self._count = a["data-class"]
        if "legend-item" in classes and a.get("data-class"):
            self.legend.add(a["data-class"])
        if "cut" in classes:
            self.cut.append(a["data-node"])
        if "block" in classes:
            self.blocks += 1

    def handle_data(self, data: str) -> None:
        if self._count is not None:
            self.counts[self._count] = int(data)
            self._count = None


def _decision(name: str):
    cap = zoo.capture(name)
    before = graph_state(cap.gm)
    d = decide_prepared(cap.gm, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert graph_state(cap.gm) == before  # read only: no copy needed
    return cap, d


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


#: The page's classes each place of the real partition allows (a forward-only
#: node is "banned" when no rule lets the cut recompute it).
_PAGE_CLASSES = {SAVED: {"saved"}, RECOMPUTED: {"recomputed"}, BACKWARD: {"backward"},
                 FORWARD: {"forward", "banned"}}


@pytest.mark.parametrize("case", ["mlp", "gpt2", "llama_sac", "moe"])
def test_page_classes_are_where_torchs_partition_put_each_node(case):
    """The oracle is torch's own partition: the forward and backward modules
    it extracted, not the placement the page computes."""
    cap, d = _decision(case)
    placement = partition_placement(cap)
    page = _parse(render_html(d, title=case, num_fwd_outputs=cap.num_fwd_outputs))
    assert placement.keys() <= page.nodes.keys()
    wrong = {name: (where, page.nodes[name]) for name, where in placement.items()
             if page.nodes[name] not in _PAGE_CLASSES[where]}
    assert not wrong
    saved = {name for name, where in placement.items() if where == SAVED}
    assert saved and {name for name, c in page.nodes.items() if c == "saved"} == saved
    assert page.legend == set(CLASSES)
    # Nodes that are in neither module (placeholders, getitems of dead
    # results, views of inputs) are counted too; the counts are the page's classes'.
    # The page counts the graph's nodes as the CLI does, the output node included.
    assert page.counts["nodes"] == len(page.nodes) + 1 == len(d.arrays.nodes)
    assert len(page.nodes) == len([n for n in d.arrays.nodes if n.op != "output"])
    expected = Counter(page.nodes.values())
    assert {k: page.counts[k] for k in CLASSES} == {k: expected[k] for k in CLASSES}
    assert page.cut == []  # the cut marks are drawn by the page's script


def test_page_draws_the_partition_under_a_memory_budget():
    """The page reads the partition's plan: at budget 0.3 its saved values
    are the ones torch's budgeted partition saves (issue 16, item 3)."""
    from torch._functorch import config as functorch_config

    cap = zoo.capture("gpt2")
    with functorch_config.patch(activation_memory_budget=0.3, activation_memory_budget_solver="dp"):
        placement = partition_placement(cap)
        d = decide_prepared(cap.gm, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    page = _parse(render_html(d, title="gpt2", num_fwd_outputs=cap.num_fwd_outputs))
    saved = {name for name, where in placement.items() if where == SAVED}
    assert saved and {name for name, c in page.nodes.items() if c == "saved"} == saved


def test_gpt2_is_collapsed_into_layer_blocks():
    cap, d = _decision("gpt2")
    text = render_html(d, num_fwd_outputs=cap.num_fwd_outputs)
    assert "L[&#x27;model&#x27;].blocks.0 &mdash;" in text and "L[&#x27;model&#x27;].blocks.1 &mdash;" in text
    assert _parse(text).blocks < 10


def test_cli_writes_the_page(tmp_path, capsys):
    out = tmp_path / "out.html"
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "--html", str(out)]) == 0
    assert "fxcut" in capsys.readouterr().out
    page = _parse(out.read_text())
    cap, d = _decision("mlp")
    assert {name for name, c in page.nodes.items() if c == "saved"} == {n.name for n in d.arrays.nodes_at(d.saved)}


def test_cli_unwritable_html_is_one_line_error(tmp_path, capsys):
    rc = cli.main(["partition", "--model", "mlp", "--no-torch", "--html", str(tmp_path / "no" / "x.html")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("fxcut: error: --html") and err.count("\n") == 1


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian's chromium is not installed (scripts/test.sh installs it with apt-get)")
def test_headless_chromium_draws_the_cut(tmp_path):
    cap, d = _decision("gpt2")
    path = tmp_path / "gpt2.html"
    path.write_text(render_html(d, title="gpt2", num_fwd_outputs=cap.num_fwd_outputs))
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    # The browser is no part of fxcut: keep the sanitizer run's preloaded ASan
    # runtime (scripts/sanitize.sh) out of it.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    dom = subprocess.run([*base, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=180,
                         check=True, env=env).stdout
    page = _parse(dom)
    assert 'data-rendered="1"' in dom
    assert Counter(page.cut) == Counter(n.name for n in d.arrays.nodes_at(d.saved))
    assert "cut-edge" in dom
    mem = _memory(dom)
    assert mem.svg and mem.peaks["fxcut"][0] == _expected(d, cap.num_fwd_outputs).peak_bytes
    png = tmp_path / "shot.png"
    subprocess.run([*base, "--window-size=1000,700", f"--screenshot={png}", path.as_uri()], capture_output=True,
                   timeout=180, check=True, env=env)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


class _Memory(HTMLParser):
    """The memory plot's lines, peak labels and forward/backward marks."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}  # line -> points in its polyline
        self.steps: dict[str, int] = {}
        self.peaks: dict[str, tuple[int, str]] = {}
        self.boundaries: dict[str, int] = {}
        self.svg = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "svg" and a.get("id") == "memory-plot":
            self.svg = True
        if tag == "polyline" and "mem-line" in classes:
            self.lines[a["data-line"]] = len((a["points"] or "").split())
            self.steps[a["data-line"]] = int(a["data-steps"])
        if "mem-peak" in classes:
            self.peaks[a["data-line"]] = (int(a["data-bytes"]), a["data-node"])
        if "fw-bw" in classes:
            self.boundaries[a["data-line"]] = int(a["data-step"])


def _memory(text: str) -> _Memory:
    m = _Memory()
    m.feed(text)
    m.close()
    return m


def _expected(d, num_fwd_outputs):
    """The memory model's answer for the decision, asked independently of the page."""
    from fxcut.tools.decisions import simulate_saved

    return simulate_saved(d.arrays, d.saved, num_fwd_outputs, timeline=True)


@pytest.mark.parametrize("case", ["mlp", "gpt2"])
def test_page_plots_the_decisions_memory_timeline(case):
    cap, d = _decision(case)
    sim = _expected(d, cap.num_fwd_outputs)
    page = _memory(render_html(d, title=case, num_fwd_outputs=cap.num_fwd_outputs))
    assert page.svg and list(page.lines) == ["fxcut"]  # the default page: one line
    assert page.lines["fxcut"] == page.steps["fxcut"] == len(sim.timeline) > 0
    assert page.peaks["fxcut"] == (sim.peak_bytes, sim.peak_node)
    assert sim.peak_bytes == max(s.live_bytes for s in sim.timeline) > 0
    assert page.boundaries["fxcut"] == sum(s.phase == "forward" for s in sim.timeline)


def test_page_plots_a_second_timeline_when_given():
    """The baseline (here torch at budget 0 against its default) is drawn
    as its own line with its own peak."""
    from torch._functorch import config as functorch_config

    from fxcut.tools.html import memory_timeline

    cap, d = _decision("gpt2")
    with functorch_config.patch(activation_memory_budget=0.0):
        d0 = decide_prepared(cap.gm, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    base = memory_timeline(d0, cap.num_fwd_outputs)
    assert base is not None and set(d0.saved) != set(d.saved)
    page = _memory(render_html(d, num_fwd_outputs=cap.num_fwd_outputs, baseline=base))
    want, want0 = _expected(d, cap.num_fwd_outputs), _expected(d0, cap.num_fwd_outputs)
    assert page.peaks == {"fxcut": (want.peak_bytes, want.peak_node), "baseline": (want0.peak_bytes, want0.peak_node)}
    assert page.lines == {"fxcut": len(want.timeline), "baseline": len(want0.timeline)}


def _torch_saved(cap, budget):
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    from fxcut.tools.report import summarize

    with functorch_config.patch(activation_memory_budget=budget):
        fw, bw = torch_partition(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                 **cap.partition_kwargs)
    return summarize(fw, bw, cap.num_fwd_outputs).saved


def test_cli_plan_page_plots_the_plan_against_torch(tmp_path, capsys):
    """--plan-budget 0: the page draws the plan's decision and its memory
    line beside torch's at the same b (activation_memory_budget=0: torch's
    own partitioner's saved values) and at its default budget; the peaks
    are the CLI's, and the page says what b means to each."""
    from fxcut.tools.decisions import simulate_saved

    out = tmp_path / "plan.html"
    assert cli.main(["partition", "--model", "gpt2", "--plan-budget", "0", "--json", "--html", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    text = out.read_text()
    page, mem = _parse(text), _memory(text)
    assert list(mem.lines) == ["fxcut", "baseline", "default"]
    # Independently: the CLI's gpt2 joint graph, torch's own partitions at b=0 and at 1, and the plan's.
    cap = cli._capture(cli.build_parser().parse_args(["partition", "--model", "gpt2"]))
    d = decide_prepared(cap.fresh(), num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    by_name = {n.name: n for n in d.arrays.nodes}

    def peak(names):
        return simulate_saved(d.arrays, [by_name[s] for s in names], cap.num_fwd_outputs).peak_bytes

    assert mem.peaks["baseline"][0] == peak(_torch_saved(cap, 0.0))
    assert mem.peaks["default"][0] == peak(_torch_saved(cap, 1.0)) == peak([n.name for n in d.arrays.nodes_at(d.saved)])
    # The plan's search is time-limited, so its decision is read off the page
    # (its saved nodes) rather than planned again: the labelled peak is that decision's.
    saved_names = {name for name, c in page.nodes.items() if c == "saved"}
    assert saved_names <= by_name.keys() and saved_names != {n.name for n in d.arrays.nodes_at(d.saved)}
    assert mem.peaks["fxcut"][0] == peak(saved_names) < mem.peaks["baseline"][0]
    figures = printed["plan_figures"]  # the CLI printed the same three peaks
    assert [figures[k]["peak_bytes"] for k in ("plan", "torch_same_budget", "torch_default")] == [
        mem.peaks[k][0] for k in ("fxcut", "baseline", "default")]
    assert "fxcut&#x27;s b bounds the peak" in text and "torch at the same b (activation_memory_budget=0)" in text


class _Axes(HTMLParser):
    """The memory plot's frame: its plot box, ticks, phase labels, the lines' points and the peak labels."""

    def __init__(self) -> None:
        super().__init__()
        self.box: tuple[float, float] | None = None  # the plot's left and right edges
        self.yticks: list[tuple[float, str]] = []
        self.xticks: list[tuple[int, float]] = []
        self.phases: dict[str, str] = {}
        self.points: dict[str, list[tuple[float, float]]] = {}
        self.labels: list[tuple[str, float, str]] = []  # anchor, x, text
        self._in: tuple[str, dict[str, str | None]] | None = None
        self._in_svg = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "svg" and a.get("id") == "memory-plot":
            self._in_svg = True
        if not self._in_svg:
            return
        if tag == "rect" and self.box is None:
            self.box = (float(a["x"]), float(a["x"]) + float(a["width"]))
        if tag == "polyline" and "mem-line" in cls:
            self.points[a["data-line"]] = [tuple(map(float, p.split(","))) for p in a["points"].split()]
        if tag == "text" and cls:
            self._in = (cls[0], a)

    def handle_endtag(self, tag):
        if tag == "svg":
            self._in_svg = False
        if tag == "text":
            self._in = None

    def handle_data(self, data):
        if self._in is None:
            return
        kind, a = self._in
        if kind == "y-tick":
            self.yticks.append((float(a["data-mib"]), data))
        elif kind == "x-tick":
            self.xticks.append((int(a["data-step"]), float(a["x"])))
        elif kind == "phase":
            self.phases[a["data-phase"]] = data
        elif kind == "mem-peak":
            self.labels.append((a.get("text-anchor") or "start", float(a["x"]), data))


def _axes(text: str) -> _Axes:
    a = _Axes()
    a.feed(text)
    a.close()
    return a


def _round_step(values: list[float]) -> float:
    """The common step of evenly spaced ticks from 0, checked to be 1, 2 or 5 x 10^k."""
    import math

    assert values[0] == 0 and len(values) >= 3, values
    step = values[1]
    for k, v in enumerate(values):
        assert math.isclose(v, k * step, rel_tol=1e-9, abs_tol=1e-12), values
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 5)), step
    return step


@pytest.mark.parametrize("case", ["mlp", "gpt2"])
def test_memory_plot_reads_right(case):
    """Round ticks on both axes (1, 2 or 5 x 10^k, in MiB on y), the phases
    named, every line from the left edge to the right, every peak label
    inside the plot, and one unit (MiB) on the whole page."""
    from torch._functorch import config as functorch_config

    from fxcut.tools.html import CHAR_WIDTH, memory_timeline

    cap, d = _decision(case)
    with functorch_config.patch(activation_memory_budget=0.0):
        d0 = decide_prepared(cap.gm, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    text = render_html(d, num_fwd_outputs=cap.num_fwd_outputs, baseline=memory_timeline(d0, cap.num_fwd_outputs),
                       baseline_label="torch (activation_memory_budget=0), a label long enough to need room")
    axes = _axes(text)
    left, right = axes.box
    ystep = _round_step([v for v, _ in axes.yticks])
    decimals = max(0, -math.floor(math.log10(ystep) + 1e-9))
    assert [label for _, label in axes.yticks] == [f"{v:,.{decimals}f}" for v, _ in axes.yticks]
    _round_step([float(k) for k, _ in axes.xticks])
    sim = _expected(d, cap.num_fwd_outputs)
    n_fw = sum(s.phase == "forward" for s in sim.timeline)
    assert axes.phases == {"forward": f"forward ({n_fw} steps)",
                           "backward": f"backward ({len(sim.timeline) - n_fw} steps)"}
    assert set(axes.points) == {"fxcut", "baseline"}
    for key, points in axes.points.items():  # both lines drawn to the end of the timeline
        assert points[0][0] == pytest.approx(left) and points[-1][0] == pytest.approx(right), key
    assert len(axes.labels) == 2
    for anchor, x, label in axes.labels:  # inside the plot, never over the left edge or a tick label
        assert anchor == "start" and left < x and x + CHAR_WIDTH * len(label) < right, (x, label)
    assert "KiB" not in text and "GiB" not in text and " MiB" in text


def test_cli_page_counts_nodes_as_the_cli_does(tmp_path, capsys):
    out = tmp_path / "mlp.html"
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "--html", str(out)]) == 0
    printed = capsys.readouterr().out
    page = _parse(out.read_text())
    assert f"joint graph: {page.counts['nodes']} nodes (the output node included)" in printed
    assert "joint graph: " in out.read_text() and "(the output node included" in out.read_text()

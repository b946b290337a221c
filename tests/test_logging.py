"""logging.getLogger("fxcut"): one INFO line per decision, bans per rule at DEBUG."""

from __future__ import annotations

import logging
import re

import pytest
from torch._functorch import config

import fxcut
import fxcut.tools.cli as cli
import fxcut.partition
import zoo
from fxcut.solve.core import Decision
from fxcut.tools.decisions import decide_graph
from torch_reference import fxcut_prepared_arrays


def _records(caplog, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fxcut" and r.levelno == level]


def _decision_of(case: str) -> Decision:
    """The decision the partitioner logs, made on the same prepared graph (the capture is only read)."""
    cap = zoo.capture(case)
    graph = cap.gm.graph
    return decide_graph(fxcut_prepared_arrays(graph), num_fwd_outputs=cap.num_fwd_outputs,
                        static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices")
                        or ())


@pytest.mark.parametrize("case", ["mlp", "gpt2_ckpt"])
def test_one_info_line_per_decision_with_its_counts(caplog, case):
    cap = zoo.capture(case)
    expected = _decision_of(case)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fxcut"):
        cap.partition(fxcut.min_cut_rematerialization_partition)
    (record,) = _records(caplog, logging.INFO)
    m = re.fullmatch(r"decision: (\d+) nodes, (\d+) needed by backward, (\d+) saved, cut (\d+) "
                     r"\(lower [\d.]+ ms, core [\d.]+ ms\)", record.getMessage())
    assert m, record.getMessage()
    assert tuple(map(int, m.groups())) == (len(expected.arrays), expected.n_required_bw, len(expected.saved),
                                           expected.cut_value)
    assert not _records(caplog, logging.DEBUG)


def test_debug_counts_bans_per_rule(caplog):
    cap = zoo.capture("gpt2_ckpt")
    expected = _decision_of("gpt2_ckpt")
    counts = expected.ban_counts()
    banned = sum(1 for c in expected.node_class if c & fxcut._C.C_BANNED)
    assert counts and sum(counts.values()) == banned
    assert counts["primal input"] == sum(1 for f in expected.arrays.flags if f & fxcut._C.F_PRIMAL)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="fxcut"):
        cap.partition(fxcut.min_cut_rematerialization_partition)
    (record,) = _records(caplog, logging.DEBUG)
    assert record.getMessage() == "bans: " + ", ".join(f"{reason} {n}" for reason, n in counts.items())


def test_ban_counts_are_not_computed_unless_debug_is_on(caplog, monkeypatch):
    def fail(self):
        raise AssertionError("ban_counts computed with DEBUG off")

    monkeypatch.setattr(Decision, "ban_counts", fail)
    with caplog.at_level(logging.INFO, logger="fxcut"):
        zoo.capture("mlp").partition(fxcut.min_cut_rematerialization_partition)
    assert len(_records(caplog, logging.INFO)) == 1


def test_cli_verbose_logs_to_stderr_for_the_command_only(capsys):
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "-vv"]) == 0
    err = capsys.readouterr().err.splitlines()
    # the warm-up and the timed run: one decision line and one bans line each
    assert [line.split(":")[1].strip() for line in err] == ["decision", "bans"] * 2
    assert all(line.startswith("fxcut: ") for line in err)
    assert not logging.getLogger("fxcut").handlers
    assert cli.main(["partition", "--model", "mlp", "--no-torch"]) == 0
    assert capsys.readouterr().err == ""

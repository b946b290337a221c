"""The public API's options: numbers out of range, unknown keywords, ``safe_budget``.

- every numeric option (budgets, the planner's ``max_work``, ``time_limit``,
  ``exact_max_candidates``, ``seed_budgets``, ``memory_pareto``'s budgets,
  ``activation_memory_budget`` from torch's config, the command line's
  budgets) rejects an out-of-range value -- an int too large for a float,
  the infinities, NaN, a bool, a string -- with a ValueError naming the
  option (:func:`fxcut._numbers.check_number`, the one check);
- every public factory rejects an unknown keyword when it is called, with a
  TypeError naming it, not later inside ``torch.compile``;
- ``safe_budget``: True/False/None, or ``FXCUT_SAFE_BUDGET``; verify mode
  refuses it (a deviation from torch's decision), at the factory and at the
  partition; inductor's cache key tells it apart.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import fxcut
from fxcut._numbers import check_int, check_number
from fxcut.integrations.torch_compile import InductorPartitioner
from fxcut.route.plan import SAFE_BUDGET_ENV, safe_budget_mode

sys.path.insert(0, str(Path(__file__).parent))
import small_graphs  # noqa: E402

BAD_NUMBERS = [10**400, -10**400, math.inf, -math.inf, math.nan, True, False, "0.5", None, [0.5]]


# --------------------------------------------------------------------------- the one check


def test_check_number_takes_reals_in_range_exactly() -> None:
    assert check_number("b", 0, 0.0, 1.0) == 0.0
    assert check_number("b", 1, 0.0, 1.0) == 1.0
    assert check_number("b", Fraction(1, 2), 0.0, 1.0) == 0.5
    assert check_int("n", 2**62, 1, 2**62) == 2**62
    with pytest.raises(ValueError, match=r"n must be an int in \[1, 4611686018427387904\], got 4611686018427387905"):
        check_int("n", 2**62 + 1, 1, 2**62)
    with pytest.raises(ValueError, match=r"t must be a number in \(0, 10\], got 0"):
        check_number("t", 0, 0.0, 10.0, lo_open=True)
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 24\], got 2.0"):
        check_int("n", 2.0, 0, 24)
    with pytest.raises(ValueError, match=r"b must be a number in \[0, 1\], got an int of 401 digits"):
        check_number("b", 10**400, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"got Fraction"):
        check_number("b", Fraction(10**400, 3), 0.0, 1.0)


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_check_number_rejects_what_is_no_number_in_range(value: Any) -> None:
    with pytest.raises(ValueError, match="^option must be a number in"):
        check_number("option", value, 0.0, 1.0)


# --------------------------------------------------------------------------- every numeric option


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize("option", ["memory_budget", "max_work", "time_limit", "exact_max_candidates"])
def test_planned_partitioner_names_the_bad_option(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{option} must be "):
        fxcut.planned_partitioner(**{option: value})
    with pytest.raises(ValueError, match=f"^{option} must be "):
        fxcut.PeakPlanner(**{option: value})


@pytest.mark.parametrize("value", [10**400, math.inf, math.nan, True, "0.5", None])
def test_seed_budgets_names_the_bad_entry(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^seed_budgets\[1\] must be a number in \[0, 1\]"):
        fxcut.planned_partitioner(seed_budgets=[0.5, value])
    with pytest.raises(ValueError, match="^seed_budgets must be a sequence"):
        fxcut.planned_partitioner(seed_budgets=0.5)  # type: ignore[arg-type]


def test_the_planner_options_keep_their_ranges() -> None:
    p = fxcut.PeakPlanner(0, exact_max_candidates=24, max_work=2**62, time_limit=1e6, seed_budgets=(0, 1))
    assert (p.memory_budget, p.exact_max_candidates, p.max_work, p.time_limit, p.seed_budgets) == (
        0.0, 24, 2**62, 1e6, [0.0, 1.0])
    for option, value in (("exact_max_candidates", 25), ("max_work", 0), ("time_limit", 0), ("time_limit", 1e6 + 1)):
        with pytest.raises(ValueError, match=option):
            fxcut.PeakPlanner(**{option: value})


@pytest.mark.parametrize("value", [10**400, math.inf, math.nan, True, -0.5, 1.5])
def test_backend_and_integration_budgets_name_the_option(value: Any) -> None:
    for factory in (fxcut.aot_backend, fxcut.inductor_backend):
        with pytest.raises(ValueError, match="^memory_budget must be a number in"):
            factory(memory_budget=value)
    with pytest.raises(ValueError, match="^memory_budget must be a number in"):
        InductorPartitioner(memory_budget=value)
    with pytest.raises(ValueError, match=r"^budgets\[1\] must be a number in"):
        fxcut.memory_pareto(small_graphs.mm_relu_joint(), 1, budgets=[0.5, value])


@pytest.mark.parametrize("value", [10**400, math.inf, math.nan, True])
def test_torchs_config_budget_is_named_and_the_graph_left_as_it_was(value: Any) -> None:
    from torch._functorch import config

    gm = small_graphs.mm_relu_joint()
    code = gm.code
    with config.patch(activation_memory_budget=value):
        with pytest.raises(ValueError, match="^activation_memory_budget must be a number in"):
            fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1)
    assert gm.code == code


def test_deepspeed_install_names_the_bad_option() -> None:
    pytest.importorskip("deepspeed.compile.backend")
    import fxcut.integrations.deepspeed as fxds

    for value in (10**400, math.nan, True):
        with pytest.raises(ValueError, match="^memory_budget must be"):
            fxds.install(memory_budget=value)
    with pytest.raises(ValueError, match="safe_budget"):
        fxds.install(safe_budget="yes")  # type: ignore[arg-type]
    assert not fxds.installed()


@pytest.mark.parametrize("flag", ["--budget", "--plan-budget"])
@pytest.mark.parametrize("value", ["1e400", "inf", "nan", "1.5", "-0.1"])
def test_cli_budgets_are_usage_errors_naming_the_flag(flag: str, value: str, capsys: Any) -> None:
    from fxcut.tools import cli

    assert cli.main(["partition", "--model", "mlp", flag, value]) == 2
    err = capsys.readouterr().err
    # 1e400 parses as inf: refused as written, not echoed as inf
    expected = "is not a finite number" if value in ("1e400", "inf", "nan") else "between 0 and 1"
    assert flag in err and expected in err and (value in err or expected != "is not a finite number"), err


# --------------------------------------------------------------------------- unknown keywords


@pytest.mark.parametrize("factory", ["aot_backend", "inductor_backend", "planned_partitioner"])
def test_a_factory_rejects_an_unknown_keyword_when_called(factory: str) -> None:
    with pytest.raises(TypeError, match="safe_budgt"):
        getattr(fxcut, factory)(safe_budgt=True)


def test_aot_backend_takes_aot_autograds_own_keywords() -> None:
    from torch._decomp import core_aten_decompositions

    fxcut.aot_backend(decompositions=core_aten_decompositions(), keep_inference_input_mutations=True)
    with pytest.raises(ValueError, match="partition_fn"):
        fxcut.aot_backend(partition_fn=fxcut.min_cut_rematerialization_partition)


def test_deepspeed_install_rejects_an_unknown_keyword() -> None:
    pytest.importorskip("deepspeed.compile.backend")
    import fxcut.integrations.deepspeed as fxds

    with pytest.raises(TypeError, match="safe_budgt"):
        fxds.install(safe_budgt=True)  # type: ignore[call-arg]
    assert not fxds.installed()


# --------------------------------------------------------------------------- safe_budget


def test_safe_budget_mode_reads_the_argument_then_the_environment(monkeypatch: Any) -> None:
    monkeypatch.delenv(SAFE_BUDGET_ENV, raising=False)
    assert safe_budget_mode() is False
    assert safe_budget_mode(True) is True
    for text, expected in (("1", True), ("on", True), ("TRUE", True), ("0", False), ("off", False), ("", False)):
        monkeypatch.setenv(SAFE_BUDGET_ENV, text)
        assert safe_budget_mode() is expected
        assert safe_budget_mode(not expected) is (not expected)
    monkeypatch.setenv(SAFE_BUDGET_ENV, "maybe")
    with pytest.raises(ValueError, match=f"{SAFE_BUDGET_ENV}='maybe'"):
        safe_budget_mode()
    with pytest.raises(ValueError, match="^safe_budget must be True, False or None"):
        safe_budget_mode(1)  # type: ignore[arg-type]


def test_verify_mode_refuses_safe_budget(monkeypatch: Any) -> None:
    monkeypatch.delenv(SAFE_BUDGET_ENV, raising=False)
    gm = small_graphs.mm_relu_joint()
    code = gm.code
    with pytest.raises(ValueError, match="safe_budget=True"):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1, verify=True, safe_budget=True)
    monkeypatch.setenv(SAFE_BUDGET_ENV, "1")
    with pytest.raises(ValueError, match="safe_budget=True"):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1, verify=True)
    assert gm.code == code
    for factory in (fxcut.aot_backend, fxcut.inductor_backend):
        with pytest.raises(ValueError, match="not with safe_budget"):
            factory(safe_budget=True, verify=True)
        factory(safe_budget=False, verify=True)  # explicitly off: torch's decision, verifiable


def test_safe_budget_on_a_graph_without_hazards_is_torchs_decision(monkeypatch: Any) -> None:
    monkeypatch.delenv(SAFE_BUDGET_ENV, raising=False)
    from torch._functorch import config

    for budget in (0.0, 0.5, 1.0):
        with config.patch(activation_memory_budget=budget):
            plain = fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1)
            safe = fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1,
                                                             safe_budget=True)
        assert [m.code for m in plain] == [m.code for m in safe]


def test_inductor_cache_key_tells_safe_budget_apart(monkeypatch: Any) -> None:
    monkeypatch.delenv(SAFE_BUDGET_ENV, raising=False)
    default, safe = InductorPartitioner(), InductorPartitioner(safe_budget=True)
    assert default.uuid() != safe.uuid()
    assert InductorPartitioner(safe_budget=False).uuid() == default.uuid()
    monkeypatch.setenv(SAFE_BUDGET_ENV, "1")  # read when inductor asks for the key
    assert default.uuid() == safe.uuid()
    with pytest.raises(ValueError, match="safe_budget"):
        InductorPartitioner(safe_budget="yes")  # type: ignore[arg-type]
    assert "safe_budget=True" in repr(safe)

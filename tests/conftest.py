"""Test-wide fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_unsafe_warnings():
    """fxcut's once-per-reason UnsafeRecomputeWarning forgotten before and after the test."""
    from fxcut.route import safety

    safety.reset_warnings()
    yield
    safety.reset_warnings()


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch):
    """torch's solve_min_cut writes min_cut_failed_graph_*.txt into the
    working directory when a cut is unbounded; keep those out of the tree."""
    monkeypatch.chdir(tmp_path)


# CI runs every hypothesis test on the same examples (derandomized), so a
# submission's result does not depend on the draw; local runs explore.
import os  # noqa: E402

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# The fidelity suite: fxcut's decisions and graphs equal the installed
# torch's.  CI runs it on every supported torch (scripts/matrix.sh):
#   pytest -m fidelity
FIDELITY_FILES = frozenset({
    "test_partition_zoo.py", "test_partition_random.py", "test_budget.py", "test_zero3_walk.py",
    "test_prepare.py", "test_versions.py", "test_verify.py", "test_extract_identity.py", "test_graph_untouched.py",
    "test_duplicate_symbols.py", "test_codegen.py",
    # the compatibility gate: the private-name table and simulated torch changes (issue 22, item 3)
    "test_compat_gate.py",
    # readers of the partition's plan (issue 16, item 3) and the route's defects (item 8)
    "test_html.py", "test_route_defects.py", "test_plan.py",
    # Not decisions alone: edge cases, bad input and explain, each holding
    # on every release (what differs is read from fxcut.torchrules.versions).
    "test_partition_edges.py", "test_bad_input.py", "test_explain.py",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FIDELITY_FILES:
            item.add_marker(pytest.mark.fidelity)

"""The C core runs without the GIL, and concurrent decisions are exact.

1. While one thread is inside a long ``_C.partition_decide`` (or
   ``_C.min_cut``), the main thread keeps running Python: it timestamps
   every turn of a counting loop, and the turns that fall inside the worker's
   C call must cover at least 30% of that call (about 87% on a quiet
   machine; on 2 cores shared with other jobs the main thread waits for a
   core, not for the GIL, and it has dropped to 50%).  Holding the GIL, the
   call would let through about one switch interval (5 ms) of main-thread
   turns; the call is made to last at least 0.2 s, so even 30% is a 12x
   margin, and the control (sorting, which keeps the GIL) must stay under
   10% (it measures about 1%).
2. Eight threads each partition a different zoo graph with
   ``fxcut.tools.decisions.decide_graph`` (lowering in Python under the GIL, the C core
   in parallel), several rounds over, and get exactly what a serial run got.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import synthetic_arrays
import zoo
from fxcut import _C
from fxcut.tools.decisions import decide_graph, lower_graph

MIN_CALL_SECONDS = 0.2


def _covered_by_python(call: Callable[[], Any]) -> tuple[float, float]:
    """Runs call() in a worker thread while this thread counts; returns
    (seconds the C call took, seconds of it during which this thread ran
    Python: the span of its timestamps inside the call)."""
    window: dict[str, float] = {}
    started = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        started.set()
        try:
            window["enter"] = time.perf_counter()
            call()
            window["exit"] = time.perf_counter()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    stamps: list[float] = []
    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    while thread.is_alive():
        stamps.append(time.perf_counter())
    thread.join()
    assert not errors, errors
    inside = [t for t in stamps if window["enter"] <= t <= window["exit"]]
    duration = window["exit"] - window["enter"]
    covered = inside[-1] - inside[0] if len(inside) > 1 else 0.0
    return duration, covered


def _long_enough(make: Callable[[int], Callable[[], Any]], size: int) -> Callable[[], Any]:
    """Grows the input until one call takes MIN_CALL_SECONDS."""
    while True:
        call = make(size)
        t0 = time.perf_counter()
        call()
        if time.perf_counter() - t0 >= MIN_CALL_SECONDS:
            return call
        size *= 2


@pytest.fixture
def switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(old)


def _decide_call(layers: int) -> Callable[[], Any]:
    arrays = synthetic_arrays.build(layers)
    return lambda: synthetic_arrays.decide(arrays)


def _min_cut_call(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(0)
    m = 4 * n
    tail = rng.integers(0, n, m, dtype=np.int32)
    head = rng.integers(0, n, m, dtype=np.int32)
    cap = rng.integers(1, 1000, m, dtype=np.int64)
    return lambda: _C.min_cut(n, tail, head, cap, 0, n - 1, 1)


def _memory_call(layers: int) -> Callable[[], Any]:
    arrays = synthetic_arrays.build(layers)
    saved = synthetic_arrays.decide(arrays).saved
    return lambda: _C.memory_simulate(arrays, num_fwd_outputs=arrays.num_fwd_outputs, saved=saved, timeline=True)


def _plan_call(layers: int) -> Callable[[], Any]:
    arrays = synthetic_arrays.build(layers)
    kind, flags, in_ptr, in_idx = arrays.kind, arrays.flags, arrays.in_ptr, arrays.in_idx
    dep = [False] * len(kind)
    roles = bytearray(len(kind))
    for i in range(len(kind)):
        dep[i] = bool(flags[i] & _C.F_TANGENT) or kind[i] == _C.KIND_OUTPUT or any(
            dep[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]])
        roles[i] = (_C.PLAN_ROLE_INPUT if kind[i] in (_C.KIND_PLACEHOLDER, _C.KIND_GET_ATTR)
                    else _C.PLAN_ROLE_BACKWARD if dep[i] else _C.PLAN_ROLE_FREE)
    return lambda: _C.plan_frontier(arrays, num_fwd_outputs=arrays.num_fwd_outputs, role=bytes(roles),
                                    exact_max_free=0, time_limit=30.0, max_points=64)


@pytest.mark.parametrize("make, size", [(_decide_call, 4000), (_min_cut_call, 200_000), (_memory_call, 4000),
                                        (_plan_call, 8)],
                         ids=["partition_decide", "min_cut", "memory_simulate", "plan_frontier"])
def test_the_gil_is_released_during_the_c_call(make, size, switch_interval) -> None:
    call = _long_enough(make, size)
    duration, covered = _covered_by_python(call)
    assert duration >= MIN_CALL_SECONDS * 0.5, duration
    # Holding the GIL would allow one switch interval (0.005 s) of Python.
    assert covered >= 0.3 * duration, f"Python ran {covered:.3f} s of a {duration:.3f} s C call"


def _sort_call(n: int) -> Callable[[], Any]:
    values = list(np.random.default_rng(0).integers(0, 1 << 40, n).tolist())
    return lambda: sorted(values)


def test_the_measure_sees_a_c_call_that_holds_the_gil(switch_interval) -> None:
    """Control: sorting a list of ints is C code that keeps the GIL (no
    bytecode runs, so no switch): the main thread is shut out."""
    call = _long_enough(_sort_call, 1 << 20)
    duration, covered = _covered_by_python(call)
    assert covered < 0.1 * duration, f"Python ran {covered:.3f} s of a {duration:.3f} s GIL-holding call"


# Eight different zoo graphs (small ones, so the whole test stays quick).
THREAD_CASES = ["mlp", "mlp_frozen", "gpt2", "gpt2_ckpt", "llama", "llama_sac", "convnet", "lstm"]


def _decision_of(name: str) -> tuple[list[int], bytes, bytes, int]:
    cap = zoo.capture(name)
    gm = cap.fresh()
    d = decide_graph(lower_graph(gm.graph), num_fwd_outputs=cap.num_fwd_outputs,
                     static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices") or ())
    return d.saved, d.tag, d.node_class, d.cut_value


def test_eight_threads_decide_exactly_as_a_serial_run() -> None:
    serial = {name: _decision_of(name) for name in THREAD_CASES}
    rounds = 3
    results: dict[tuple[str, int], Any] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(THREAD_CASES))

    def worker(name: str) -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                results[(name, r)] = _decision_of(name)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(name,)) for name in THREAD_CASES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name in THREAD_CASES:
        assert serial[name][0], f"{name}: nothing saved"
        for r in range(rounds):
            assert results[(name, r)] == serial[name], f"{name}, round {r}"


def test_threads_share_one_input_read_only() -> None:
    """Concurrent calls on the same arrays (the core only reads them)."""
    arrays = synthetic_arrays.build(300)
    expected = synthetic_arrays.decide(arrays)
    out: list[Any] = [None] * 8
    def worker(k: int) -> None:
        out[k] = synthetic_arrays.decide(arrays)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o == expected for o in out)


def _flip_forever(arrays: list[np.ndarray], stop: threading.Event, seed: int) -> None:
    """Rewrite the arrays with garbage and back, as fast as Python can,
    until stop: out-of-range and negative indices, pointers past the end."""
    rng = np.random.default_rng(seed)
    good = [a.copy() for a in arrays]
    bad = []
    for a in arrays:
        b = rng.integers(-3, 3 * len(a) + 3, len(a)).astype(a.dtype)
        b[:: max(1, len(b) // 7)] = np.iinfo(a.dtype).max
        bad.append(b)
    while not stop.is_set():
        for a, g, b in zip(arrays, good, bad):
            a[:] = b
            a[:] = g
    for a, g in zip(arrays, good):
        a[:] = g


def test_buffers_rewritten_during_calls_never_crash() -> None:
    """Another thread rewrites the index buffers while the core runs without
    the GIL.  What the core validated must be what it reads (it copies the
    index arrays first): every call either answers or raises a clean error,
    never reads or writes out of bounds (the sanitizer run would abort) and
    never crashes; with the buffers restored the answer is the usual one."""
    arrays = synthetic_arrays.build(60)
    expected = synthetic_arrays.decide(arrays)
    n = 4000
    rng = np.random.default_rng(1)
    tail = rng.integers(0, n, 4 * n, dtype=np.int32)
    head = rng.integers(0, n, 4 * n, dtype=np.int32)
    cap = rng.integers(0, 1000, 4 * n, dtype=np.int64)
    cut = _C.min_cut(n, tail, head, cap, 0, n - 1)
    targets = [arrays.in_ptr, arrays.in_idx, arrays.outputs, tail, head, cap]
    stop = threading.Event()
    flipper = threading.Thread(target=_flip_forever, args=(targets, stop, 2))
    flipper.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(60):
            for name, call in (("decide", lambda: synthetic_arrays.decide(arrays)),
                               ("walk", lambda: _C.param_alias_walk(arrays, np.arange(3, dtype=np.int32))),
                               ("min_cut", lambda: _C.min_cut(n, tail, head, cap, 0, n - 1))):
                try:
                    call()
                    outcome = "ok"
                except (ValueError, IndexError, RuntimeError, OverflowError) as e:
                    outcome = type(e).__name__
                outcomes[f"{name}:{outcome}"] = outcomes.get(f"{name}:{outcome}", 0) + 1
    finally:
        stop.set()
        flipper.join()
    assert sum(outcomes.values()) == 180, outcomes
    assert synthetic_arrays.decide(arrays) == expected
    assert _C.min_cut(n, tail, head, cap, 0, n - 1) == cut

"""The binding checks what it hands to C integer fields and arguments before
ctypes sees them: ctypes wraps an out-of-range int into a uint32_t or a
pointer silently (2**32 + 100 becomes 100), truncates nothing but refuses
floats with a message that names no argument, and raises its own
ArgumentError for None. Every integer argument is checked against its C
field's range (InvalidArgumentError, a ValueError too, naming the argument and
the range, raised by the binding: its ``function`` is not a ``ds_*`` call),
refuses floats, bools and None (TypeError naming the argument), and lets
the boundary values through to the library. All on the simulated device."""

from __future__ import annotations

import ctypes
import math
import re
from typing import Any, Callable, Optional

import pytest

import detshare
from detshare import serving

from conftest import make_rt

U32 = 2**32 - 1
U64 = 2**64 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
BIG = None  # no upper bound (Python's int)


def _close(obj: Any) -> None:
    """Closes what a boundary call made (a vCtx, runtime, graph, PDMux)."""
    close = getattr(obj, "close", None)
    if callable(close):
        close()


def _vctx(rt: detshare.Runtime) -> detshare.VCtx:
    return rt.vctx("checked")


def _kernel(rt: detshare.Runtime) -> detshare.SimKernel:
    return rt.sim.kernel("k", 1.0)


def _graph(rt: detshare.Runtime) -> detshare.Graph:
    k = _kernel(rt)
    return _vctx(rt).graph_raw(lambda s: rt.sim.launch_on_stream(s, k, 1, 1), name="g")


# name: the argument as the message names it; lo, hi: its C field's range
# (hi None: no upper bound); call(rt, value) passes value as that argument.
CASES = [
    # ds_vctx_attr
    ("slo_us", 0, U32, lambda rt, v: rt.vctx("v", slo_us=v)),
    ("weight", 0, U32, lambda rt, v: rt.vctx("v", weight=v)),
    ("priority", I32_MIN, I32_MAX, lambda rt, v: rt.vctx("v", priority=v)),
    ("initial_pctx", I32_MIN, I32_MAX, lambda rt, v: rt.vctx("v", initial_pctx=v)),
    # ds_launch
    ("function", 0, U64, lambda rt, v: _vctx(rt).launch(v, 1, 1)),
    ("grid", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), v, 1)),
    ("grid[1]", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), (1, v), 1)),
    ("block", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), 1, v)),
    ("block[2]", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), 1, [1, 1, v])),
    ("shared_mem_bytes", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), 1, 1, shared_mem_bytes=v)),
    ("expected_us", 0, U32, lambda rt, v: _vctx(rt).launch(_kernel(rt), 1, 1, expected_us=v)),
    # vCtx actions
    ("pctx", 0, U32, lambda rt, v: _vctx(rt).remap(v)),
    ("window_us", 0, U32, lambda rt, v: _vctx(rt).set_window(v)),
    ("interval_us", 0, U32, lambda rt, v: _vctx(rt).set_gate_interval(v)),
    ("req", 0, U64, lambda rt, v: _vctx(rt).request_end(v)),
    # runtime
    ("pctx", 0, U32, lambda rt, v: rt.probe_sms(v)),
    ("tick_us", 0, U32, lambda rt, v: rt.register_native_policy("p_tick", 1, tick_us=v)),
    ("on_launch", 0, U64, lambda rt, v: rt.register_native_policy("p_hook", v)),
    ("user_data", 0, U64, lambda rt, v: rt.register_native_policy("p_user", 1, user_data=v)),
    # graphs
    ("pctxs[1]", 0, U32, lambda rt, v: _vctx(rt).graph_raw(lambda s: None, pctxs=[0, v])),
    ("graph", 0, U64, lambda rt, v: _vctx(rt).graph_from_cuda_graph(v)),
    ("graphs[0]", 0, U64, lambda rt, v: _vctx(rt).graph_from_cuda_graphs([v])),
    ("index", 0, U32, lambda rt, v: _graph(rt).segment(v)),
    ("stream", 0, U64, lambda rt, v: detshare.graph_cut(v)),
    # simulated device
    ("stream", 0, U64, lambda rt, v: rt.sim.launch_on_stream(v, _kernel(rt), 1, 1)),
    ("function", 0, U64, lambda rt, v: rt.sim.launch_on_stream(0, v, 1, 1)),
    ("grid[0]", 0, U32, lambda rt, v: rt.sim.launch_on_stream(0, _kernel(rt), (v,), 1)),
    ("blocks_per_sm", 0, U32, lambda rt, v: rt.sim.kernel("k", 1.0, blocks_per_sm=v)),
    ("param_sizes[0]", 0, U32, lambda rt, v: rt.sim.kernel("k", 1.0, param_sizes=[v])),
    # serving helper (the decode vCtx's slo_us; counts checked before anything is made)
    ("tpot_slo_us", 0, U32, lambda rt, v: serving.PDMux(rt, "single", tpot_slo_us=v)),
    ("max_batch", 1, BIG, lambda rt, v: serving.PDMux(rt, "single", max_batch=v, buckets=[1, 2**40])),
    ("buckets[0]", 1, BIG, lambda rt, v: serving.PDMux(rt, "single", max_batch=1, buckets=[v])),
    ("sm_group_num", 3, BIG, lambda rt, v: serving.PDMux(rt, "single", sm_group_num=v)),
    ("decode_bs_divisor", 1, BIG, lambda rt, v: serving.PDMux(rt, "single", decode_bs_divisor=v)),
]

# ds_runtime_config and ds_sim_config: call(value) creates a runtime.
RUNTIME_CASES = [
    ("device_ordinal", 0, I32_MAX, lambda v: make_rt(device_ordinal=v)),
    ("max_vctx", 0, U32, lambda v: make_rt(max_vctx=v)),
    ("teardown_timeout_ms", 0, U32, lambda v: make_rt(teardown_timeout_ms=v)),
    ("scheduler_period_us", I32_MIN, I32_MAX, lambda v: detshare.Runtime("sim", scheduler_period_us=v)),
    ("ls_sms", 0, U32, lambda v: make_rt(ls_sms=v)),
    ("idle_us", 0, U32, lambda v: make_rt(idle_us=v)),
    ("be_window_us", 0, U32, lambda v: make_rt(be_window_us=v)),
    ("gate_interval_us", 0, U32, lambda v: make_rt(gate_interval_us=v)),
    ("heartbeat_timeout_ms", 0, U32, lambda v: make_rt(heartbeat_timeout_ms=v)),
    ("fault_presume_ms", 0, U32, lambda v: make_rt(fault_presume_ms=v)),
    ("tiers[0].sm_count", 0, U32, lambda v: make_rt(tiers=[(v, "low")])),
    ("tiers[1].sm_count", 0, U32, lambda v: make_rt(tiers=[(8, "low"), detshare.Tier(v, "high")])),
    ("sm_count", 0, U32, lambda v: make_rt(sim=detshare.SimConfig(sm_count=v))),
    ("min_partition_sms", 0, U32, lambda v: make_rt(sim=detshare.SimConfig(min_partition_sms=v))),
    ("sm_alignment", 0, U32, lambda v: make_rt(sim=detshare.SimConfig(sm_alignment=v))),
    ("trace_capacity", 0, U32, lambda v: make_rt(sim=detshare.SimConfig(trace_capacity=v))),
]

# Upper boundaries not handed to the library: it divides by zero on them
# (the simulated device's split rounds min_partition_sms up to sm_alignment
# in 32 bits), a defect of the library's own checks, not of the binding.
_LIBRARY_UNSAFE = {("sm_alignment", U32)}

WRONG_TYPES = [1.5, 2.0, math.nan, True, None, "1", b"1", [1, 2, 3, 4, 5]]
# None is NULL, a valid value, for these
NONE_VALID = {"stream", "user_data", "on_launch", "interval_us", "fault_presume_ms"}


def _binding_refused(e: BaseException, name: str) -> None:
    """e is the binding's own range error for the argument `name`."""
    assert isinstance(e, detshare.InvalidArgumentError) and isinstance(e, ValueError)
    assert not e.function.startswith("ds_"), f"the library, not the binding, refused it: {e}"
    assert re.search(rf"(?<![\w.\[]){re.escape(name)}(?![\w\[])", str(e)), str(e)


def _range_text(lo: int, hi: Optional[int]) -> str:
    return f">= {lo}" if hi is None else f"{lo}..{hi}"


def _ids(cases: list) -> list:
    seen: dict = {}
    out = []
    for c in cases:
        n = seen[c[0]] = seen.get(c[0], 0) + 1
        out.append(c[0] if n == 1 else f"{c[0]}#{n}")
    return out


def _outside(lo: int, hi: Optional[int]) -> list:
    vals = [lo - 1, lo - 2**40]
    if hi is not None:
        vals += [hi + 1, hi + 100, 2**64 + lo]
    return vals


def _accepts(make: Callable[[], Any], name: str) -> None:
    """The binding lets the value through: the call succeeds or the library
    (a ds_* function) refuses it."""
    try:
        made = make()
    except detshare.DetShareError as e:
        assert e.function.startswith("ds_"), f"{name}: the binding refused a value in range: {e}"
    else:
        _close(made)


# --- every integer argument -------------------------------------------------------------------


@pytest.mark.parametrize("name,lo,hi,call", CASES, ids=_ids(CASES))
def test_out_of_range_is_refused_by_the_binding(name, lo, hi, call):
    for bad in _outside(lo, hi):
        with make_rt("manual") as rt:
            with pytest.raises(detshare.InvalidArgumentError) as ei:
                _close(call(rt, bad))
            _binding_refused(ei.value, name)
            assert _range_text(lo, hi) in str(ei.value), str(ei.value)
            assert repr(bad) in str(ei.value), str(ei.value)


@pytest.mark.parametrize("name,lo,hi,call", CASES, ids=_ids(CASES))
@pytest.mark.parametrize("bad", WRONG_TYPES, ids=repr)
def test_wrong_type_is_a_type_error_naming_the_argument(name, lo, hi, call, bad):
    if name.startswith(("grid", "block")) and isinstance(bad, list) and "[" not in name:
        pytest.skip("a list is a valid grid or block (ValueError past 3 dimensions, tested below)")
    if bad is None and name in NONE_VALID:
        pytest.skip(f"None is NULL for {name}")
    with make_rt("manual") as rt:
        with pytest.raises(TypeError) as ei:
            _close(call(rt, bad))
        assert re.search(rf"(?<![\w.\[]){re.escape(name)}(?![\w\[])", str(ei.value)), str(ei.value)
        assert type(bad).__name__ in str(ei.value), str(ei.value)


@pytest.mark.parametrize("name,lo,hi,call", CASES, ids=_ids(CASES))
def test_boundaries_reach_the_library(name, lo, hi, call):
    for good in (lo, hi if hi is not None else 2**40):
        with make_rt("manual") as rt:
            _accepts(lambda: call(rt, good), name)


@pytest.mark.parametrize("name,lo,hi,call", RUNTIME_CASES, ids=_ids(RUNTIME_CASES))
def test_runtime_config_out_of_range(name, lo, hi, call):
    for bad in _outside(lo, hi):
        with pytest.raises(detshare.InvalidArgumentError) as ei:
            _close(call(bad))
        _binding_refused(ei.value, name)
        assert _range_text(lo, hi) in str(ei.value), str(ei.value)


@pytest.mark.parametrize("name,lo,hi,call", RUNTIME_CASES, ids=_ids(RUNTIME_CASES))
@pytest.mark.parametrize("bad", WRONG_TYPES, ids=repr)
def test_runtime_config_wrong_type(name, lo, hi, call, bad):
    if bad is None and name in NONE_VALID:
        pytest.skip(f"None is documented for {name}")
    with pytest.raises(TypeError) as ei:
        _close(call(bad))
    assert re.search(rf"(?<![\w.\[]){re.escape(name)}(?![\w\[])", str(ei.value)), str(ei.value)


@pytest.mark.parametrize("name,lo,hi,call", RUNTIME_CASES, ids=_ids(RUNTIME_CASES))
def test_runtime_config_boundaries_reach_the_library(name, lo, hi, call):
    for good in (lo, hi):
        if (name, good) not in _LIBRARY_UNSAFE:
            _accepts(lambda: call(good), name)


# --- the reported cases, and nothing stored on a refusal ------------------------------------------


def test_slo_us_that_c_would_wrap_is_refused_and_nothing_is_made(rt):
    for bad in (2**32 + 100, -1, 2**40):
        with pytest.raises(detshare.InvalidArgumentError, match=r"slo_us must be in 0\.\.4294967295"):
            rt.vctx("ls", cls="ls", slo_us=bad)
    with pytest.raises(detshare.InvalidArgumentError, match="weight"):
        rt.vctx("be", weight=2**40)
    assert rt.vctxs == ()
    v = rt.vctx("ls", cls="ls", slo_us=U32, weight=U32, priority=I32_MAX)
    assert (v.slo_us, v.weight, v.priority) == (U32, U32, I32_MAX)
    assert rt.vctx("w0", weight=0).weight == 1  # 0 means 1, as the library reads it


@pytest.mark.parametrize("bad", [-1, 1, 99, 10_000_001, 2**32 + 1000])
def test_segment_us_is_refused_by_the_binding(rt, bad):
    v = rt.vctx("v")
    for call in (lambda: v.graph_raw(lambda s: None, segment_us=bad),
                 lambda: v.graph_from_cuda_graph(1, segment_us=bad),
                 lambda: v.graph_from_cuda_graphs([1], segment_us=bad)):
        with pytest.raises(detshare.InvalidArgumentError) as ei:
            call()
        _binding_refused(ei.value, "segment_us")
    assert v.graphs == ()


def test_enum_arguments_are_not_truncated_floats(rt):
    with pytest.raises(TypeError, match="cls"):
        rt.vctx("v", cls=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="phase"):
        rt.vctx("v", phase=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cls"):
        rt.vctx("v", cls=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        rt.vctx(7)  # type: ignore[arg-type]
    assert rt.vctxs == ()
    with pytest.raises(TypeError, match="gates"):
        make_rt(gates=1.0)
    with pytest.raises(TypeError, match="rck"):
        make_rt(rck=None)
    with pytest.raises(TypeError, match=r"tiers\[0\]\.anchor"):
        make_rt(tiers=[(64, 0.5)])
    with pytest.raises(TypeError, match=r"tiers\[0\]"):
        make_rt(tiers=[64])
    with pytest.raises(TypeError, match="tiers"):
        make_rt(tiers=64)
    with pytest.raises(TypeError, match="sim"):
        detshare.Runtime("sim", sim={"sm_count": 64})  # type: ignore[arg-type]
    with make_rt(rck=False) as r:  # documented: a bool
        assert r.stats().rck_running is False


@pytest.mark.parametrize("args,kw,name", [
    ((None, 1, 1), {}, "function"),
    (("k", 1, 1), {}, "function"),
    ((1.0, 1, 1), {}, "function"),
    ((True, 1, 1), {}, "function"),
    ((object(), 1, 1), {}, "function"),
    (("K", None, 1), {}, "grid"),
    (("K", "8", 1), {}, "grid"),
    (("K", 1, None), {}, "block"),
    (("K", 1, 1.5), {}, "block"),
    (("K", (1, 2.5), 1), {}, r"grid\[1\]"),
    (("K", 1, 1, 5), {}, "params"),
    (("K", 1, 1, "ab"), {}, "params"),
    (("K", 1, 1, ctypes.c_int(1)), {}, "params"),
    (("K", 1, 1, [3]), {}, "kernel parameter 0"),
    (("K", 1, 1), {"shared_mem_bytes": None}, "shared_mem_bytes"),
    (("K", 1, 1), {"expected_us": 2.5}, "expected_us"),
    (("K", 1, 1), {"phase": 1.0}, "phase"),
])
def test_launch_type_errors_name_the_argument(rt, args, kw, name):
    v = rt.vctx("v")
    k = rt.sim.kernel("k", 1.0, param_sizes=[4])
    args = tuple(k if a == "K" else a for a in args)
    with pytest.raises(TypeError, match=rf"^VCtx\.launch: {name}"):
        v.launch(*args, **kw)
    with pytest.raises(ValueError, match="grid"):
        v.launch(k, (1, 1, 1, 1), 1, [ctypes.c_int(1)])
    v.synchronize()
    assert v.stats().launches == 0 and rt.sim.trace() == [], "nothing launched"


def test_launch_none_names_the_kernel(rt):
    v = rt.vctx("v")
    with pytest.raises(TypeError, match=r"VCtx\.launch: function must be .* not NoneType"):
        v.launch(None, 1, 1)
    with pytest.raises(TypeError, match=r"SimDevice\.launch_on_stream: function must be .* not NoneType"):
        rt.sim.launch_on_stream(0, None, 1, 1)
    with pytest.raises(TypeError, match=r"SimDevice\.launch_on_stream: params"):
        rt.sim.launch_on_stream(0, rt.sim.kernel("k"), 1, 1, 3)  # type: ignore[arg-type]
    k = rt.sim.kernel("k")

    class CuPyLike:  # an object with an int .ptr (CuPy's RawKernel.kernel)
        ptr = k.handle

    v.launch(CuPyLike(), 1, 1)
    v.launch(k.handle, 1, 1)
    v.synchronize()
    assert [r.function for r in rt.sim.trace()] == [k.handle] * 2


def test_refused_actions_change_nothing(rt):
    v = rt.vctx("v")
    v.set_window(500)
    v.set_gate_interval(40)
    v.remap(1)
    v.synchronize()
    for call, bad in ((v.set_window, 2**32 + 7), (v.set_gate_interval, -1), (v.remap, 2**32 + 2),
                      (v.set_window, 7.9), (v.set_gate_interval, True), (v.remap, 2.0)):
        with pytest.raises((detshare.InvalidArgumentError, TypeError)):
            call(bad)
    v.synchronize()
    st = v.stats()
    assert (st.window_us, st.gate_interval_us, v.pctx, st.remaps) == (500, 40, 1, 1)


def test_pdmux_refusal_leaves_the_runtime_as_it_was():
    with make_rt("shared") as rt:
        for kw in ({"tpot_slo_us": 2**32}, {"tpot_slo_us": -1}, {"tpot_slo_us": 5.5}, {"max_batch": 2.0},
                   {"buckets": [1, 2.5, 32]}, {"sm_group_num": True}, {"decode_bs_divisor": 0}):
            with pytest.raises((ValueError, TypeError)):
                serving.PDMux(rt, "single", **kw)
            assert rt.policy == "shared" and rt.vctxs == (), kw
        with serving.PDMux(rt, "single", max_batch=4) as mux:
            for bad in (-1, 1.5, True, "2"):
                with pytest.raises((detshare.InvalidArgumentError, TypeError), match="decode_bs"):
                    mux.adjust(bad)
                with pytest.raises((detshare.InvalidArgumentError, TypeError), match="decode_bs"):
                    mux.prefill(lambda s: None, decode_bs=bad)
            for bad in (2.0, True, None):
                with pytest.raises(TypeError, match=r"\bn\b"):
                    mux.bucket(bad)
                with pytest.raises(TypeError, match=r"\bn\b"):
                    mux.decode(bad)
            assert mux.bucket(4) == 4 and mux.stats().decode_steps == 0


# --- numbers handed to C doubles: C checks the value, the binding the type --------------------------


REAL_CASES = [
    ("t_us", lambda rt, v: rt.sim.sleep_until(v)),
    ("block_us", lambda rt, v: rt.sim.kernel("k", v)),
    ("latency_us", lambda rt, v: rt.vctx("v", cls="ls").request_record(v)),
    ("launch_overhead_us", lambda rt, v: make_rt(sim=detshare.SimConfig(launch_overhead_us=v))),
    ("time_scale", lambda rt, v: make_rt(sim=detshare.SimConfig(clock="realtime", time_scale=v))),
]


@pytest.mark.parametrize("name,call", REAL_CASES, ids=[c[0] for c in REAL_CASES])
def test_real_arguments(name, call):
    with make_rt("manual") as rt:
        for bad in (math.nan, math.inf, -math.inf, 10**400):  # refused by the library
            with pytest.raises(detshare.InvalidArgumentError) as ei:
                _close(call(rt, bad))
            assert ei.value.function.startswith("ds_"), str(ei.value)
        for bad in (None, "1.0", b"1", True, [1.0]):
            with pytest.raises(TypeError, match=re.escape(name)):
                _close(call(rt, bad))
        _close(call(rt, 1))  # an int is a number
        _close(call(rt, 2.5))


def test_policy_names_and_values(rt):
    for bad in (None, 3, b"shared"):
        with pytest.raises(TypeError, match=r"set_policy: name must be a str"):
            rt.set_policy(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"set_policy_param: policy must be a str"):
            rt.set_policy_param(bad, "ls_sms", 32)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"get_policy_param: name must be a str"):
            rt.get_policy_param("slo_aware", bad)  # type: ignore[arg-type]
    for bad in (True, None, [32]):
        with pytest.raises(TypeError, match=r"set_policy_param: value must be"):
            rt.set_policy_param("slo_aware", "ls_sms", bad)  # type: ignore[arg-type]
    for bad in (math.nan, math.inf, 12.5):  # the library's own checks
        with pytest.raises(detshare.InvalidArgumentError) as ei:
            rt.set_policy_param("slo_aware", "ls_sms", bad)
        assert ei.value.function == "ds_policy_param_set"
    assert rt.get_policy_param("slo_aware", "ls_sms") == 64
    assert rt.policy == "slo_aware"


def test_log_level_and_handler():
    for bad in (2.0, None, "warn", True):
        with pytest.raises(TypeError, match="set_log_handler: level"):
            detshare.set_log_handler(print, bad)  # type: ignore[arg-type]
    with pytest.raises(detshare.InvalidArgumentError, match="level"):
        detshare.set_log_handler(print, 2**32 + 2)
    with pytest.raises(TypeError, match="set_log_handler: handler"):
        detshare.set_log_handler("print")  # type: ignore[arg-type]
    detshare.set_log_handler(None, detshare.LogLevel.WARN)


def test_graph_arguments_checked_before_anything_runs(rt):
    v = rt.vctx("v")
    calls = []
    for kw in ({"pctxs": [0, -1]}, {"pctxs": 3}, {"pctxs": [0.0]}, {"name": 5}, {"segment_us": 2**32 + 1000}):
        with pytest.raises((detshare.InvalidArgumentError, TypeError)):
            v.graph_raw(calls.append, **kw)
        with pytest.raises((detshare.InvalidArgumentError, TypeError)):
            v.graph(lambda: calls.append(1), warmup=1, **kw)  # refused before the warm-up would run
    for bad in (-1, 1.0, True, None):
        with pytest.raises((detshare.InvalidArgumentError, TypeError), match="warmup"):
            v.graph(lambda: calls.append(1), warmup=bad)
    assert calls == [] and v.graphs == ()

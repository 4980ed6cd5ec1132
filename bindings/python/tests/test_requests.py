"""Request latency accounting (VCtx.request_begin / request_end /
request_record / request()): totals, the count over the SLO, the sliding
window's nearest-rank p50 and p99 in VCtxStats, latencies on the simulated
clock, and bad input refused with nothing recorded."""

from __future__ import annotations

import math
import re
import threading
from typing import List, Sequence

import pytest

import detshare
from detshare import _types as T

from conftest import REPO_ROOT, make_rt


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ceil(q*n)-th smallest of values (what the library computes)."""
    s = sorted(values)
    return s[max(math.ceil(q * len(s)), 1) - 1]


def ls(rt: detshare.Runtime, slo_us: int = 0, name: str = "ls") -> detshare.VCtx:
    return rt.vctx(name, cls="ls", slo_us=slo_us)


def request_fields(st: detshare.VCtxStats) -> tuple:
    return (st.requests, st.requests_over_slo, st.request_window, st.request_window_over_slo,
            st.request_p50_us, st.request_p99_us)


def test_request_window_is_the_headers():
    text = (REPO_ROOT / "include" / "detshare" / "detshare.h").read_text()
    m = re.search(r"^#define DS_REQUEST_WINDOW (\d+)\s*$", text, re.M)
    assert m, "DS_REQUEST_WINDOW not found in detshare.h"
    assert detshare.REQUEST_WINDOW == T.DS_REQUEST_WINDOW == int(m.group(1)) == 256


def test_a_new_vctx_has_no_requests():
    with make_rt("manual") as rt:
        st = ls(rt, 100).stats()
    assert request_fields(st) == (0, 0, 0, 0, 0.0, 0.0)
    assert isinstance(st.request_p50_us, float) and isinstance(st.request_window, int)


def test_recorded_latencies_counts_over_the_slo_and_percentiles():
    with make_rt("manual") as rt:
        v = ls(rt, 100)
        for i in range(1, 11):
            v.request_record(20.0 * i)  # 20 .. 200 us; 100 itself is not over the SLO
        st = v.stats()
    # 120..200 are over; p50 = 5th smallest of 10, p99 = 10th
    assert request_fields(st) == (10, 5, 10, 5, 100.0, 200.0)
    assert (st.launches, st.sections, st.graph_launches) == (0, 0, 0), "requests are not launches"


@pytest.mark.parametrize("values", [[37.0], [30.0, 10.0], [5.0, 1.0, 3.0], [7.0, 2.0, 9.0, 4.0]],
                         ids=lambda v: f"n{len(v)}")
def test_percentiles_of_small_windows_are_nearest_rank(values: List[float]):
    with make_rt("manual") as rt:
        v = ls(rt)
        for x in values:
            v.request_record(x)
        st = v.stats()
    assert st.request_window == st.requests == len(values)
    assert st.request_p50_us == nearest_rank(values, 0.50)
    assert st.request_p99_us == nearest_rank(values, 0.99) == max(values)
    assert (st.requests_over_slo, st.request_window_over_slo) == (0, 0), "no SLO: nothing is over it"


def test_the_window_slides_over_the_last_256():
    # 1..300 us in a shuffled order (37 is coprime to 300), as the C test
    values = [float((i * 37) % 300 + 1) for i in range(300)]
    with make_rt("manual") as rt:
        v = ls(rt, 250)
        for x in values:
            v.request_record(x)
        st = v.stats()
    window = values[-detshare.REQUEST_WINDOW:]
    assert st.requests == 300
    assert st.requests_over_slo == 50, "251..300 are over 250 us"
    # a run begins at each value over 250 after one within it (values climb by 37: 260 then 297)
    assert st.requests_over_slo_runs == sum(x > 250 and (i == 0 or values[i - 1] <= 250)
                                            for i, x in enumerate(values)) == 37
    assert st.request_window == detshare.REQUEST_WINDOW
    assert st.request_window_over_slo == sum(x > 250 for x in window)
    assert st.request_p50_us == nearest_rank(window, 0.50) == sorted(window)[127]
    assert st.request_p99_us == nearest_rank(window, 0.99) == sorted(window)[253]
    assert (nearest_rank(values, 0.50), nearest_rank(values, 0.99)) == (150.0, 297.0), \
        "over all 300 they would differ: the window is what is measured"
    assert (st.request_p50_us, st.request_p99_us) != (150.0, 297.0)


def test_record_accepts_its_range_and_ints():
    with make_rt("manual") as rt:
        v = ls(rt, 10)
        v.request_record(0)
        v.request_record(1e12)
        v.request_record(7)  # an int
        st = v.stats()
    assert (st.requests, st.requests_over_slo, st.request_window) == (3, 1, 3)
    assert st.request_p50_us == 7.0
    assert st.request_p99_us == pytest.approx(1e12, rel=1e-7)  # kept as a 32-bit float


def test_window_values_are_32_bit_floats():
    with make_rt("manual") as rt:
        v = ls(rt)
        v.request_record(100.1)
        st = v.stats()
    assert st.request_p50_us == st.request_p99_us == pytest.approx(100.1, rel=1e-7)


def test_begin_end_measure_on_the_simulated_clock():
    with make_rt("manual") as rt:
        v = ls(rt, 35)
        t0 = rt.sim.now_us()
        a = v.request_begin()
        assert isinstance(a, int) and a != 0
        rt.sim.sleep_until(t0 + 10)
        b = v.request_begin()  # requests overlap
        rt.sim.sleep_until(t0 + 40)
        assert v.request_end(b) == pytest.approx(30.0, abs=1e-6)
        assert v.request_end(a) == pytest.approx(40.0, abs=1e-6)
        st = v.stats()
        assert (st.requests, st.requests_over_slo, st.request_window, st.request_window_over_slo) == (2, 1, 2, 1)
        assert st.request_p50_us == pytest.approx(30.0, abs=1e-6)
        assert st.request_p99_us == pytest.approx(40.0, abs=1e-6)
        rt.sim.sleep_until(t0 + 45)
        assert v.request_end(a) == pytest.approx(45.0, abs=1e-6), "ending twice records twice"
        assert v.stats().requests == 3


def test_a_request_spans_the_work_it_waits_for():
    with make_rt("manual") as rt:
        v = ls(rt)
        k = rt.sim.kernel("k", 40.0)
        req = v.request_begin()
        v.launch(k, 132, 128)
        v.synchronize()
        lat = v.request_end(req)
        st = v.stats()
    assert lat >= 40.0 - 1e-6
    assert st.launches == 1 and st.requests == 1
    assert st.request_p99_us == pytest.approx(lat, rel=1e-6)


def test_a_request_may_end_on_another_thread():
    with make_rt("manual") as rt:
        v = ls(rt)
        t0 = rt.sim.now_us()
        req = v.request_begin()
        rt.sim.sleep_until(t0 + 15)
        out: List[float] = []
        th = threading.Thread(target=lambda: out.append(v.request_end(req)))
        th.start()
        th.join()
        assert out == [pytest.approx(15.0, abs=1e-6)]
        assert v.stats().requests == 1


def test_request_context_manager():
    with make_rt("manual") as rt:
        v = ls(rt, 20)
        t0 = rt.sim.now_us()
        with v.request() as r:
            assert isinstance(r, detshare.Request)
            assert r.vctx is v and r.start != 0 and r.latency_us is None
            assert "open" in repr(r)
            rt.sim.sleep_until(t0 + 25)
        assert r.latency_us == pytest.approx(25.0, abs=1e-6)
        assert "25 us" in repr(r)
        st = v.stats()
    assert (st.requests, st.requests_over_slo, st.request_window) == (1, 1, 1)
    assert st.request_p50_us == pytest.approx(25.0, abs=1e-6)


def test_request_context_manager_ends_the_request_when_the_block_raises():
    with make_rt("manual") as rt:
        v = ls(rt)
        t0 = rt.sim.now_us()
        boom = KeyError("boom")
        with pytest.raises(KeyError) as ei:
            with v.request() as r:
                rt.sim.sleep_until(t0 + 12)
                raise boom
        assert ei.value is boom, "the block's exception propagates unchanged"
        assert r.latency_us == pytest.approx(12.0, abs=1e-6)
        st = v.stats()
    assert st.requests == 1
    assert st.request_p99_us == pytest.approx(12.0, abs=1e-6)


def test_request_context_managers_nest():
    with make_rt("manual") as rt:
        v = ls(rt)
        t0 = rt.sim.now_us()
        with v.request() as outer:
            rt.sim.sleep_until(t0 + 5)
            with v.request() as inner:
                rt.sim.sleep_until(t0 + 8)
            rt.sim.sleep_until(t0 + 20)
        assert inner.latency_us == pytest.approx(3.0, abs=1e-6)
        assert outer.latency_us == pytest.approx(20.0, abs=1e-6)
        st = v.stats()
    assert st.requests == 2
    assert st.request_p50_us == pytest.approx(3.0, abs=1e-6)
    assert st.request_p99_us == pytest.approx(20.0, abs=1e-6)


def test_closing_inside_a_request_block_drops_the_request():
    with make_rt("manual") as rt:
        v = ls(rt)
        with v.request() as r:
            v.close()
        assert r.latency_us is None
        w = ls(rt, name="other")
        with w.request() as r2:
            rt.close()  # the runtime, and its vCtxs with it
        assert r2.latency_us is None and w.closed


def test_bad_input_raises_and_records_nothing():
    with make_rt("manual") as rt:
        v = ls(rt, 100)
        for bad in (math.nan, -1.0, -1e-9, math.inf, -math.inf, 1e12 * (1 + 1e-9), 10**400):
            with pytest.raises(detshare.InvalidArgumentError) as ei:
                v.request_record(bad)
            assert isinstance(ei.value, ValueError)
            assert ei.value.status == 1 and ei.value.function == "ds_vctx_request_record"
            assert "ds_vctx_request_record" in ei.value.message, ei.value.message
        for junk in ("1.0", None, b"1"):
            with pytest.raises(TypeError):
                v.request_record(junk)  # type: ignore[arg-type]

        with pytest.raises(detshare.InvalidArgumentError) as ei:
            v.request_end(0)
        assert ei.value.function == "ds_vctx_request_end"
        assert "ds_vctx_request_begin" in ei.value.message, ei.value.message
        future = int(rt.sim.now_us() * 1e3) + 1 + 10**6  # a start 1 ms from now
        with pytest.raises(detshare.InvalidArgumentError, match="ds_vctx_request_end"):
            v.request_end(future)
        for out_of_range in (-1, 2**64):
            with pytest.raises(detshare.InvalidArgumentError) as ei:
                v.request_end(out_of_range)
            assert ei.value.function == "VCtx.request_end"
        with pytest.raises(TypeError):
            v.request_end(1.5)  # type: ignore[arg-type]

        st = v.stats()
        assert request_fields(st) == (0, 0, 0, 0, 0.0, 0.0), "nothing was recorded"
        v.request_record(50.0)  # and the vCtx still records afterwards
        assert request_fields(v.stats()) == (1, 0, 1, 0, 50.0, 50.0)


def test_a_closed_vctx_raises():
    with make_rt("manual") as rt:
        v = ls(rt)
        req = v.request_begin()
        v.close()
        with pytest.raises(detshare.InvalidHandleError):
            v.request_begin()
        with pytest.raises(detshare.InvalidHandleError):
            v.request_end(req)
        with pytest.raises(detshare.InvalidHandleError):
            v.request_record(1.0)
        with pytest.raises(detshare.InvalidHandleError):
            with v.request():
                pytest.fail("the block must not run")
        w = ls(rt, name="w")
    with pytest.raises(detshare.InvalidHandleError):  # its runtime was closed
        w.request_record(1.0)


def test_concurrent_records_are_all_counted():
    threads, each = 4, 500
    with make_rt("manual") as rt:
        v = ls(rt, 1000)
        go = threading.Barrier(threads)

        def worker(t: int) -> None:
            go.wait()
            for i in range(each):
                v.request_record(float(t * each + i + 1))  # 1 .. 2000, each once

        ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        st = v.stats()
    assert st.requests == threads * each
    assert st.requests_over_slo == threads * each - 1000
    assert st.request_window == detshare.REQUEST_WINDOW
    assert 1.0 <= st.request_p50_us <= st.request_p99_us <= 2000.0
    assert st.request_window_over_slo <= detshare.REQUEST_WINDOW

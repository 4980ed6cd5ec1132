"""Gates, the resident control kernel (RCK) and the watchdog from Python, on
the simulated device: configuration and its errors, queued work stopping at
its next gate and resuming in program order, the owner thread waiting while
its gate is closed, the hardware-queue budget, the RCK's heartbeat, and the
statistics that report all of it."""

from __future__ import annotations

import ctypes
import textwrap
import threading
import time

import pytest

import detshare

from conftest import make_rt, run_python


def _id_kernel(rt: detshare.Runtime, name: str, block_us: float) -> detshare.SimKernel:
    """A kernel with one int parameter, an id the trace keeps."""
    return rt.sim.kernel(name, block_us, param_sizes=[ctypes.sizeof(ctypes.c_int)])


def _rec_id(rec: detshare.SimKernelRecord) -> int:
    return ctypes.c_int.from_buffer_copy(rec.params).value


def _poll_until(rt: detshare.Runtime, until_us: float) -> None:
    """Scheduler passes every simulated ms up to until_us."""
    while rt.sim.now_us() < until_us:
        rt.sim.sleep_until(rt.sim.now_us() + 1000.0)
        rt.poll()


# ---- configuration ---------------------------------------------------------


def test_runtime_stats_defaults():
    with make_rt("manual") as rt:
        st = rt.stats()
        assert isinstance(st, detshare.RuntimeStats)
        assert st.gates is detshare.GateMode.HOST, "AUTO resolves to host-written gates"
        assert st.rck_running is False and st.rck_sm_count == 0 and st.rck_beats == 0
        assert st.heartbeat_age_us == -1
        assert (st.gates_closed, st.gate_refusals, st.gate_expiries, st.overruns) == (0, 0, 0, 0)
        assert st.max_closed_gates == rt.info().max_connections - 2, "one queue free, one margin"
        vs = rt.vctx("v").stats()
        assert vs.gate_interval_us is None, "no gates until asked for"
        assert vs.gate_closed is False
        assert (vs.gates, vs.gate_closes, vs.gate_closed_us, vs.gate_holds, vs.overruns) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("gates", ["host", "HOST", detshare.GateMode.HOST, int(detshare.GateMode.HOST)])
def test_gate_mode_spellings(gates):
    with make_rt("manual", gates=gates) as rt:
        assert rt.stats().gates is detshare.GateMode.HOST


def test_bad_gate_and_rck_values():
    with pytest.raises(ValueError, match="GateMode"):
        make_rt(gates="sometimes")
    with pytest.raises(ValueError, match="GateMode"):
        make_rt(gates=7)
    with pytest.raises(ValueError, match="RckMode"):
        make_rt(rck="maybe")
    with pytest.raises(ValueError, match="RckMode"):
        make_rt(rck=3)
    with pytest.raises(ValueError, match="gate_interval_us"):
        make_rt(gate_interval_us=-1)
    with pytest.raises(ValueError, match="heartbeat_timeout_ms"):
        make_rt(heartbeat_timeout_ms=2**32)
    # the library's own check: RCK-written gates need the RCK
    with pytest.raises(detshare.InvalidArgumentError, match="DS_RCK_ON") as ei:
        make_rt(gates="rck")
    assert ei.value.function == "ds_runtime_create"
    # the RCK needs an SM group that no LOW tier uses
    with pytest.raises(detshare.NotSupportedError, match="RCK"):
        make_rt(rck=True, tiers=[(132, "low")])


def test_gates_off():
    with make_rt("manual", gates="off") as rt:
        assert rt.stats().gates is detshare.GateMode.OFF
        assert rt.stats().max_closed_gates == 0
        v = rt.vctx("v")
        with pytest.raises(detshare.NotSupportedError, match="gates are off") as ei:
            v.gate_close()
        assert ei.value.function == "ds_vctx_gate_close"
        with pytest.raises(detshare.NotSupportedError):
            v.set_gate_interval(0)
        with pytest.raises(detshare.NotSupportedError):
            with v.gate_closed():
                pytest.fail("the block must not run when the gate cannot close")
        v.set_gate_interval(None)  # turning gates off is always fine
        v.set_gate_interval(detshare.GATES_NONE)
        v.gate_open()  # opening an open gate does nothing
        k = rt.sim.kernel("k", 10.0)
        v.launch(k, 1, 32)
        v.synchronize()
        st = v.stats()
        assert (st.gates, st.gate_closes, st.gate_closed, st.gate_interval_us) == (0, 0, False, None)


def test_set_gate_interval_places_gates_by_predicted_work():
    with make_rt("manual") as rt:
        k = rt.sim.kernel("k", 10.0)
        v = rt.vctx("v")
        v.set_gate_interval(100)
        assert v.stats().gate_interval_us == 100
        for _ in range(20):  # 30 us predicted each: a gate before kernels 0, 4, 8, 12, 16
            v.launch(k, 1, 32, expected_us=30)
        assert v.stats().gates == 5
        v.set_gate_interval(None)
        assert v.stats().gate_interval_us is None
        for _ in range(20):
            v.launch(k, 1, 32, expected_us=30)
        assert v.stats().gates == 5, "no gates once the interval is None"
        v.synchronize()
        with pytest.raises(ValueError, match="interval_us"):
            v.set_gate_interval(-1)


# ---- a gated vCtx ------------------------------------------------------------


@pytest.mark.parametrize("gates,rck", [("host", False), ("rck", True)])
def test_closed_gate_stops_queued_work_at_its_next_boundary(gates, rck):
    """BE's ten queued 100-us kernels, a gate before each; the gate closes while
    the third runs. Nothing more starts until it opens; then all ten have run,
    in order, each once."""
    with make_rt("manual", gates=gates, rck=rck) as rt:
        t0 = rt.sim.now_us()
        bek = _id_kernel(rt, "be", 100.0)
        be = rt.vctx("be")
        be.set_gate_interval(0)
        for i in range(10):
            be.launch(bek, 64, 128, [ctypes.c_int(i)])
        rt.sim.sleep_until(t0 + 250.0)  # kernels 0 and 1 done, 2 running
        be.gate_close()
        be.gate_close()  # closing a closed gate does nothing
        rt.sim.sleep_until(t0 + 2000.0)

        started = [r for r in rt.sim.trace() if r.name == "be" and r.start_us >= 0]  # (the RCK is traced too)
        assert [_rec_id(r) for r in started] == [0, 1, 2], "the running kernel finished, nothing after it started"
        assert all(r.start_us <= t0 + 250.0 for r in started)
        st = be.stats()
        assert st.gate_closed is True
        assert st.gate_closes == 1
        assert st.gates == 10, "a gate before each of the ten kernels"
        assert rt.stats().gates_closed == 1

        be.gate_open()
        be.synchronize()
        recs = [r for r in rt.sim.trace() if r.name == "be"]
        assert [_rec_id(r) for r in recs] == list(range(10)), "every kernel once, in launch order"
        for a, b in zip(recs, recs[1:]):
            assert b.start_us >= a.end_us >= 0
        st = be.stats()
        assert st.gate_closed is False
        assert st.gate_closed_us >= 1700, "closed from 250 us to past 2000 us"
        assert rt.stats().gates_closed == 0


def test_gate_closed_context_manager_reopens():
    with make_rt("manual") as rt:
        k = rt.sim.kernel("k", 100.0)
        v = rt.vctx("v")
        v.set_gate_interval(0)
        for _ in range(3):
            v.launch(k, 132, 32)
        with v.gate_closed() as same:
            assert same is v
            assert v.stats().gate_closed is True
            assert rt.stats().gates_closed == 1
            rt.sim.sleep_until(rt.sim.now_us() + 1000.0)
            assert sum(r.start_us >= 0 for r in rt.sim.trace()) == 1, "held at the second gate"
        assert v.stats().gate_closed is False
        with pytest.raises(RuntimeError, match="boom"):
            with v.gate_closed():
                raise RuntimeError("boom")
        assert v.stats().gate_closed is False, "reopened when the block raised"
        assert v.stats().gate_closes == 2
        v.synchronize()
        assert len([r for r in rt.sim.trace() if r.end_us >= 0]) == 3


def test_gate_closed_context_manager_with_the_vctx_closed_inside():
    with make_rt("manual") as rt:
        v = rt.vctx("v")
        with v.gate_closed():
            v.close()  # destroying the vCtx opens its gate
        assert v.closed
        assert rt.stats().gates_closed == 0


# A held owner thread advances the virtual clock by 20 us per check of its
# gate, so the default 10 s expiry passes in well under a second of wall time:
# the tests where another thread opens the gate give it much longer.
_NO_EXPIRY_MS = 3_600_000


def test_owner_waits_at_its_next_launch_while_closed():
    with make_rt("manual", teardown_timeout_ms=_NO_EXPIRY_MS) as rt:
        k = rt.sim.kernel("k", 10.0)
        v = rt.vctx("v")
        v.set_gate_interval(0)
        opened = threading.Event()

        def open_later() -> None:
            time.sleep(0.05)
            opened.set()
            v.gate_open()  # any thread

        v.gate_close()
        th = threading.Thread(target=open_later)
        th.start()
        v.launch(k, 1, 32)
        assert opened.is_set(), "launch returned before the gate opened"
        th.join()

        opened.clear()
        v.gate_close()
        th = threading.Thread(target=open_later)
        th.start()
        with v.section():
            assert opened.is_set(), "a section waits for the gate too"
        th.join()
        st = v.stats()
        assert st.gate_holds == 2
        assert st.gate_closes == 2
        assert rt.stats().gate_expiries == 0, "opened by the other thread, not by expiry"
        v.synchronize()


def test_close_from_another_thread_while_owner_launches():
    """A scheduler thread closes and opens the gate while the owner launches:
    every kernel runs once, in program order."""
    with make_rt("manual", teardown_timeout_ms=_NO_EXPIRY_MS) as rt:
        k = _id_kernel(rt, "k", 20.0)
        v = rt.vctx("v")
        v.set_gate_interval(0)
        stop = threading.Event()
        first_closed = threading.Event()
        errors = []

        def toggler() -> None:
            try:
                while not stop.is_set():
                    with v.gate_closed():
                        first_closed.set()
                        time.sleep(0.001)
                    time.sleep(0.001)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
            finally:
                first_closed.set()

        th = threading.Thread(target=toggler)
        th.start()
        assert first_closed.wait(10)
        try:
            for i in range(200):
                v.launch(k, 8, 32, [ctypes.c_int(i)])
        finally:
            stop.set()
            th.join()
        v.synchronize()
        assert errors == []
        assert [_rec_id(r) for r in rt.sim.trace()] == list(range(200))
        st = v.stats()
        assert st.gate_closed is False and st.gate_closes >= 1 and st.gates == 200
        assert rt.stats().gate_expiries == 0


# ---- the hardware-queue budget -------------------------------------------------


def test_close_refused_past_the_hardware_queue_budget():
    with make_rt("manual") as rt:
        budget = rt.stats().max_closed_gates
        assert budget == rt.info().max_connections - 2
        vs = [rt.vctx(f"be{i}") for i in range(budget + 1)]
        for v in vs[:budget]:
            v.gate_close()
        assert rt.stats().gates_closed == budget
        with pytest.raises(detshare.LimitError, match="CUDA_DEVICE_MAX_CONNECTIONS") as ei:
            vs[budget].gate_close()
        assert ei.value.function == "ds_vctx_gate_close"
        assert vs[budget].stats().gate_closed is False, "refused: it stays open"
        st = rt.stats()
        assert st.gate_refusals == 1
        assert st.gates_closed == budget
        with pytest.raises(detshare.LimitError):
            with vs[budget].gate_closed():
                pytest.fail("the block must not run when the close is refused")
        assert rt.stats().gate_refusals == 2
        if budget:
            vs[0].gate_open()
            vs[budget].gate_close()  # room again
            assert vs[budget].stats().gate_closed is True
            assert rt.stats().gates_closed == budget


def test_budget_follows_cuda_device_max_connections():
    """The library reads CUDA_DEVICE_MAX_CONNECTIONS once per process: a fresh
    interpreter with 5 connections has 3 closable gates, 2 beside the RCK."""
    code = textwrap.dedent(
        """
        import detshare
        with detshare.Runtime("sim", scheduler_period_us=-1, policy="manual") as rt:
            print(rt.info().max_connections, rt.stats().max_closed_gates)
            vs = [rt.vctx() for _ in range(4)]
            for v in vs[:3]:
                v.gate_close()
            try:
                vs[3].gate_close()
            except detshare.LimitError:
                print("refused", rt.stats().gate_refusals)
        with detshare.Runtime("sim", scheduler_period_us=-1, policy="manual", gates="rck", rck=True) as rt:
            print(rt.stats().max_closed_gates)
        """
    )
    r = run_python(code, env={"CUDA_DEVICE_MAX_CONNECTIONS": "5"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["5 3", "refused 1", "2"]


# ---- the resident control kernel and the watchdog ------------------------------


def test_rck_runs_and_beats():
    with make_rt("manual", gates="rck", rck=True, heartbeat_timeout_ms=5, fault_presume_ms=None) as rt:
        st = rt.stats()
        assert st.gates is detshare.GateMode.RCK
        assert st.rck_running is True
        assert st.rck_sm_count > 0
        assert st.max_closed_gates == rt.info().max_connections - 3, "the RCK keeps one queue busy"
        beats0 = st.rck_beats
        _poll_until(rt, rt.sim.now_us() + 5000.0)
        st = rt.stats()
        assert st.rck_beats >= beats0 + 4, f"beating ({beats0} -> {st.rck_beats})"
        assert 0 <= st.heartbeat_age_us < 1000.0
        assert st.heartbeat_misses == 0


def test_rck_with_host_gates():
    with make_rt("manual", rck=detshare.RckMode.ON) as rt:
        st = rt.stats()
        assert st.gates is detshare.GateMode.HOST, "AUTO is host-written even beside the RCK"
        assert st.rck_running is True


def test_rck_boundaries_are_timestamped():
    with make_rt("manual", gates="rck", rck="on") as rt:
        k = _id_kernel(rt, "k", 100.0)
        v = rt.vctx("v")
        v.set_gate_interval(0)
        for i in range(20):
            v.launch(k, 64, 128, [ctypes.c_int(i)])
        v.synchronize()
        rt.poll()
        st = rt.stats()
        assert st.boundaries >= 20
        assert st.rck_profile_samples >= 18, "consecutive boundaries around one kernel are a sample"


def test_watchdog_counts_work_far_past_its_profile():
    with make_rt("manual") as rt:
        slow = _id_kernel(rt, "slow", 60000.0)  # runs 60 ms, predicted 3 ms
        v = rt.vctx("v")
        t1 = rt.sim.now_us()
        v.launch(slow, 1, 32, [ctypes.c_int(1)], expected_us=3000)
        _poll_until(rt, t1 + 20000.0)
        assert v.stats().overruns == 0, "not yet past 4 x 3 ms + 10 ms"
        _poll_until(rt, t1 + 30000.0)
        assert v.stats().overruns == 1
        assert rt.stats().overruns == 1
        v.synchronize()

"""detshare.serving: SGLang's stream groups (divide_sm, pdmux_group), the pool
every mode needs (pool_tiers), decode buckets, PDMux (its modes' policies and
vCtxs, decode graphs per bucket and pCtx, the prefill worker, pdmux_static's
group changes and remaps, teardown) and RequestStats (TTFT, TPOT, SLOs,
goodput). Simulated device: the virtual clock for single-threaded checks, the
realtime clock where the prefill worker thread runs chunks."""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections import Counter

import pytest

import detshare
from detshare import serving
from detshare.serving import (
    PDMux,
    PDMuxStats,
    PrefillTicket,
    RequestStats,
    default_buckets,
    divide_sm,
    pdmux_group,
    percentile,
    pool_tiers,
)

WAIT_S = 5.0  # bound on every wait for another thread: a broken module fails, never hangs


class Boom(Exception):
    pass


class Env:
    """A simulated runtime with serving.pool_tiers(132) (or the default pool),
    the PDMux objects made on it and the events tests block prefill chunks
    on. close() releases the events, closes the muxes, then the runtime."""

    def __init__(self, clock: str = "virtual", *, tiers=True, **kw) -> None:
        if clock == "virtual":
            kw.setdefault("scheduler_period_us", -1)
        self.rt = detshare.Runtime("sim", tiers=pool_tiers(132) if tiers else None,
                                   sim=detshare.SimConfig(clock=clock), **kw)
        self.muxes = []
        self.events = []
        self.dec = self.rt.sim.kernel("dec", 2.0, param_sizes=[4])
        self.captures = []

    def mux(self, mode: str, **kw) -> PDMux:
        m = PDMux(self.rt, mode, **kw)
        self.muxes.append(m)
        return m

    def event(self) -> threading.Event:
        e = threading.Event()
        self.events.append(e)
        return e

    def capture(self, bs: int, stream: int) -> None:
        """capture_decode_raw's function: one kernel "dec" of bs blocks whose
        parameter is bs."""
        self.captures.append(bs)
        self.rt.sim.launch_on_stream(stream, self.dec, bs, 32, [ctypes.c_int(bs)])

    def close(self) -> None:
        for e in self.events:
            e.set()
        try:
            for m in self.muxes:
                m.close()
        finally:
            self.rt.close()


@pytest.fixture
def env():
    e = Env("virtual")
    yield e
    e.close()


@pytest.fixture
def real():
    e = Env("realtime")
    yield e
    e.close()


def param(rec) -> int:
    return int.from_bytes(rec.params[:4], "little", signed=True)


# ---- SGLang's stream groups ----------------------------------------------------------


def test_divide_sm_hopper():
    assert divide_sm(132, 6) == [112, 104, 96, 88, 80, 72]  # SGLang on an H100/H200
    # 132: x in 8..124 step 8, x >= 132 - x (x >= 72) and 132 - x >= 16 (x <= 116): 72..112, six values
    assert divide_sm(132, 4) == [96, 88, 80, 72]  # step 6 // 4 = 1: the first four
    assert divide_sm(132, 3) == [104, 88, 72]  # step 2
    assert divide_sm(132, 2) == [96, 72]  # step 3
    assert divide_sm(132, 1) == [72]  # step 6
    assert divide_sm(132, 7) == divide_sm(132, 100) == [112, 104, 96, 88, 80, 72]  # more parts than possible
    assert divide_sm(132, 0) == []


def test_divide_sm_by_hand():
    # 64 SMs: x in 8..56 step 8, x >= 32 and 64 - x >= 16 (x <= 48): [32, 40, 48]
    assert divide_sm(64, 6) == [48, 40, 32]
    assert divide_sm(64, 3) == [48, 40, 32]
    assert divide_sm(64, 2) == [40, 32]  # step 3 // 2 = 1: [32, 40]
    assert divide_sm(64, 1) == [32]  # step 3: [32]
    # 96 SMs: 48..80 -> [48, 56, 64, 72, 80]
    assert divide_sm(96, 8) == [80, 72, 64, 56, 48]
    assert divide_sm(96, 2) == [64, 48]  # step 5 // 2 = 2: [48, 64]
    assert divide_sm(40, 6) == [24]
    assert divide_sm(32, 6) == [16]  # 16 / 16, the smallest split there is
    # Ampere's constraints (4 SMs, multiples of 2) on an A100's 108 SMs: 54..92 (20 values), step 3
    assert divide_sm(108, 6, min_per_part=4, multiple=2) == [84, 78, 72, 66, 60, 54]


@pytest.mark.parametrize("sms", [1, 8, 16, 24, 31])
def test_divide_sm_too_few_sms(sms):
    assert divide_sm(sms, 6) == []


def test_divide_sm_rule_holds_everywhere():
    for total in range(1, 300):
        possible = [x for x in range(8, total - 7, 8) if 2 * x >= total and total - x >= 16]
        for parts in range(0, 9):
            got = divide_sm(total, parts)
            assert len(got) == min(parts, len(possible)), (total, parts)
            assert got == sorted(got, reverse=True) and len(set(got)) == len(got)
            assert set(got) <= set(possible), (total, parts, got)


@pytest.mark.parametrize("args", [(0, 6), (-132, 6), (132, -1)])
def test_divide_sm_bad_counts(args):
    with pytest.raises(ValueError):
        divide_sm(*args)


def test_divide_sm_bad_constraints():
    with pytest.raises(ValueError):
        divide_sm(132, 6, multiple=0)
    with pytest.raises(ValueError):
        divide_sm(132, 6, multiple=-8)
    with pytest.raises(ValueError):
        divide_sm(132, 6, min_per_part=0)


def test_pdmux_group_table():
    g, div = 8, 36
    both = {1: 1, 5: 1, 6: 1, 12: 2, 18: 3, 24: 4, 30: 5, 35: 5, 36: 6, 37: 6, 100: 6}
    for bs, want in both.items():
        assert pdmux_group(g, bs, True, div) == want, bs
        assert pdmux_group(g, bs, True) == want, "36 is the default divisor"
    for bs in (1, 12, 36, 100):
        assert pdmux_group(g, bs, False) == 7, "decode only: the whole GPU for decode"
    assert pdmux_group(g, 0, True) == 0, "prefill only: the whole GPU for prefill"
    assert pdmux_group(g, 0, False) == 0, "idle"
    assert pdmux_group(3, 1000, True) == 1 and pdmux_group(3, 5, False) == 2
    assert pdmux_group(8, 12, True, decode_bs_divisor=6) == 6  # 12*6//6 = 12, capped at G-2
    assert serving.SM_GROUP_NUM == 8 and serving.DECODE_BS_DIVISOR == 36


@pytest.mark.parametrize("args", [(2, 1, True), (0, 1, False), (8, -1, True), (8, -1, False)])
def test_pdmux_group_errors(args):
    with pytest.raises(ValueError):
        pdmux_group(*args)


def test_pdmux_group_divisor_error():
    with pytest.raises(ValueError):
        pdmux_group(8, 4, True, 0)


# ---- pool_tiers ----------------------------------------------------------------------


def check_pool(total, tiers, ls_tiers=(16, 32, 64), groups=8):
    assert tiers[0] == detshare.Tier(total, detshare.Anchor.FULL)
    assert all(t.anchor != detshare.Anchor.FULL for t in tiers[1:]), "one whole-GPU tier, first"
    pairs = list(zip(tiers[1::2], tiers[2::2]))
    assert len(tiers) == 1 + 2 * len(pairs)
    for low, high in pairs:
        assert (low.anchor, high.anchor) == (detshare.Anchor.LOW, detshare.Anchor.HIGH)
        assert low.sm_count + high.sm_count == total
    lows = [lo.sm_count for lo, _ in pairs]
    want_ls = [x for x in ls_tiers if 0 < x and x + 8 <= total]
    splits = divide_sm(total, groups - 2)
    assert lows == want_ls + splits, "ls tiers, then divide_sm's splits (prefill LOW, decode HIGH)"


def test_pool_tiers_132():
    tiers = pool_tiers(132)
    assert len(tiers) == 19
    check_pool(132, tiers)
    assert [t.sm_count for t in tiers[7::2]] == [112, 104, 96, 88, 80, 72]
    assert [t.sm_count for t in tiers[8::2]] == [20, 28, 36, 44, 52, 60]
    with detshare.Runtime("sim", tiers=tiers, scheduler_period_us=-1) as rt:
        info = rt.info()
        assert len(info.pctx) == len(tiers)
        for p, t in zip(info.pctx, tiers):
            assert (p.sm_count, p.anchor) == (t.sm_count, t.anchor), p
        assert info.full_pctx == 0


def test_pool_tiers_options_and_other_sizes():
    check_pool(64, pool_tiers(64))  # the 64-SM LOW tier would leave no SM: skipped
    assert [t.sm_count for t in pool_tiers(64)[1::2]] == [16, 32, 48, 40, 32]
    check_pool(132, pool_tiers(132, ls_tiers=()), ls_tiers=())
    check_pool(132, pool_tiers(132, ls_tiers=(0, 8, 124, 125, 200)), ls_tiers=(8, 124))
    check_pool(132, pool_tiers(132, sm_group_num=3), groups=3)
    assert len(pool_tiers(132, sm_group_num=3)) == 1 + 6 + 2
    assert pool_tiers(16) == [detshare.Tier(16, detshare.Anchor.FULL)], "no LS tier, no split"
    for total in (64, 96):
        tiers = pool_tiers(total)
        with detshare.Runtime("sim", tiers=tiers, sim=detshare.SimConfig(sm_count=total),
                              scheduler_period_us=-1) as rt:
            got = [(p.sm_count, p.anchor) for p in rt.info().pctx]
        assert got == [(t.sm_count, t.anchor) for t in tiers]


@pytest.mark.parametrize("kw", [dict(total_sms=0), dict(total_sms=-1), dict(total_sms=132, sm_group_num=2)])
def test_pool_tiers_errors(kw):
    total = kw.pop("total_sms")
    with pytest.raises(ValueError):
        pool_tiers(total, **kw)


# ---- buckets -------------------------------------------------------------------------


def test_default_buckets():
    assert default_buckets(1) == (1,)
    assert default_buckets(2) == (1, 2)
    assert default_buckets(3) == (1, 2, 3)
    assert default_buckets(8) == (1, 2, 4, 8)
    assert default_buckets(9) == (1, 2, 4, 8, 9)
    assert default_buckets(16) == (1, 2, 4, 8, 16)
    assert default_buckets(20) == (1, 2, 4, 8, 16, 20)
    assert default_buckets(32) == (1, 2, 4, 8, 16, 24, 32)
    assert default_buckets(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    for mb in range(1, 200):
        b = default_buckets(mb)
        assert isinstance(b, tuple) and b[-1] == mb, mb
        assert list(b) == sorted(set(b))
        assert all(x in (1, 2, 4, 8) or x % 8 == 0 for x in b[:-1])
    for bad in (0, -1):
        with pytest.raises(ValueError):
            default_buckets(bad)


def test_bucket(env):
    m = env.mux("single", max_batch=32)
    assert m.buckets == (1, 2, 4, 8, 16, 24, 32) and m.max_batch == 32
    want = {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 24, 24: 24, 25: 32, 31: 32, 32: 32}
    assert {n: m.bucket(n) for n in want} == want
    for bad in (0, -1, 33, 100):
        with pytest.raises(ValueError):
            m.bucket(bad)
    m.close()
    c = env.mux("single", max_batch=20, buckets=[3, 7, 64], name="custom")
    assert c.buckets == (3, 7, 64)
    assert [c.bucket(n) for n in (1, 3, 4, 7, 8, 20)] == [3, 3, 7, 7, 64, 64]
    with pytest.raises(ValueError):
        c.bucket(21)  # above max_batch, although a bucket is larger


# ---- PDMux construction --------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(mode=""),
    dict(mode=None),
    dict(mode="single", max_batch=0),
    dict(mode="single", max_batch=-4),
    dict(mode="slo_aware", buckets=[1, 4, 2, 32]),
    dict(mode="slo_aware", buckets=[1, 2, 2, 32]),
    dict(mode="slo_aware", buckets=[1, 2, 16]),  # the last below max_batch (32)
    dict(mode="slo_aware", buckets=[]),
    dict(mode="slo_aware", buckets=[0, 32]),
    dict(mode="slo_aware", buckets=[-1, 32]),
    dict(mode="pdmux_static", sm_group_num=2),
    dict(mode="slo_aware", sm_group_num=0),
    dict(mode="pdmux_static", decode_bs_divisor=0),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_construction_value_errors(env, kw):
    before = env.rt.policy
    mode = kw.pop("mode")
    threads = threading.active_count()
    with pytest.raises(ValueError):
        PDMux(env.rt, mode, **kw)
    assert env.rt.vctxs == ()
    assert env.rt.policy == before
    assert threading.active_count() == threads, "no worker started"


def test_pdmux_static_needs_the_split_tiers():
    e = Env("virtual", tiers=False, max_vctx=2)  # the library's default pool: no 112-SM LOW tier
    try:
        with pytest.raises(detshare.NotFoundError) as ei:
            PDMux(e.rt, "pdmux_static")
        assert isinstance(ei.value, LookupError) and ei.value.status == 13
        msg = str(ei.value)
        assert "112" in msg and "LOW" in msg, msg
        assert e.rt.vctxs == ()
        a, b = e.rt.vctx("a"), e.rt.vctx("b")  # max_vctx=2: the library has none of the failed helper's
        a.close()
        b.close()
    finally:
        e.close()


def test_pdmux_static_without_any_split():
    """24 SMs: no split leaves 16 SMs to decode (divide_sm(24, 6) == [])."""
    with detshare.Runtime("sim", tiers=pool_tiers(24), sim=detshare.SimConfig(sm_count=24),
                          scheduler_period_us=-1) as rt:
        with pytest.raises(detshare.NotFoundError, match="24 SMs"):
            PDMux(rt, "pdmux_static")
        assert rt.vctxs == ()
        with PDMux(rt, "slo_aware") as m:  # the other modes need no split
            assert m.group == -1


def test_unknown_policy_is_the_librarys_not_found(env):
    with pytest.raises(detshare.NotFoundError) as ei:
        PDMux(env.rt, "no_such_policy")
    assert ei.value.status == 13 and ei.value.function == "ds_runtime_set_policy"
    assert env.rt.vctxs == ()


def test_failed_decode_vctx_closes_the_prefill_vctx():
    e = Env("virtual", max_vctx=1)
    try:
        with pytest.raises(detshare.LimitError):
            PDMux(e.rt, "slo_aware")  # the prefill vCtx fits, the decode one does not
        assert e.rt.vctxs == ()
        with e.mux("single") as m:  # the library has room for one again
            assert len(e.rt.vctxs) == 1 and m.decode_vctx is m.prefill_vctx
        assert e.rt.vctxs == ()
    finally:
        e.close()


LS, BE = detshare.VCtxClass.LATENCY_SENSITIVE, detshare.VCtxClass.BEST_EFFORT
PH = detshare.Phase


@pytest.mark.parametrize("mode,policy", [
    ("single", "priority"),
    ("pdmux_static", "manual"),
    ("slo_aware", "slo_aware"),
    ("slo_aware_nogates", "slo_aware_nogates"),
    ("tpot_first", "tpot_first"),
    ("priority", "priority"),
    ("shared", "shared"),
])
def test_modes_set_policy_classes_and_phases(env, mode, policy):
    assert mode in serving.MODES or mode in detshare.BUILTIN_POLICIES
    env.rt.set_policy("balance")
    m = env.mux(mode, tpot_slo_us=40_000, name="eng")
    assert env.rt.policy == policy and m.policy == policy and m.mode == mode
    assert m.tpot_slo_us == 40_000
    if mode == "single":
        assert m.prefill_vctx is m.decode_vctx
        v = m.decode_vctx
        assert env.rt.vctxs == (v,) and v.name == "eng"
        assert v.cls == LS and v.slo_us == 40_000
        assert v.phase == PH.NONE
    else:
        p, d = m.prefill_vctx, m.decode_vctx
        assert p is not d and set(env.rt.vctxs) == {p, d}
        assert (p.name, d.name) == ("eng-prefill", "eng-decode")
        assert (p.cls, p.phase) == (BE, PH.PREFILL)
        assert (d.cls, d.phase, d.slo_us) == (LS, PH.DECODE, 40_000)
    assert m.adjust() == (0 if mode == "pdmux_static" else -1)
    assert m.group == (0 if mode == "pdmux_static" else -1)
    assert bool(m.groups) == (mode == "pdmux_static")
    assert not m.closed and mode in repr(m)


@pytest.mark.parametrize("mode", ["slo_aware", "tpot_first", "single"])
def test_a_ttft_slo_makes_prefill_latency_sensitive_and_record_ttft_feeds_it(env, mode):
    m = env.mux(mode, tpot_slo_us=40_000, ttft_slo_us=300_000, name="eng")
    assert m.ttft_slo_us == 300_000
    p = m.prefill_vctx
    before = p.stats().requests
    m.record_ttft(250_000.0)
    m.record_ttft(350_000)
    st = p.stats()
    if mode == "single":  # one vCtx, whose requests are decode steps: nothing recorded
        assert p is m.decode_vctx and st.requests == before
    else:
        assert (p.cls, p.phase, p.slo_us) == (LS, PH.PREFILL, 300_000)
        assert st.requests == before + 2 and st.requests_over_slo == 1
    with pytest.raises(detshare.InvalidArgumentError):
        m.record_ttft(-1.0)
    with pytest.raises(TypeError):
        m.record_ttft("1")
    m.close()
    with pytest.raises(detshare.InvalidHandleError):
        m.record_ttft(1.0)


@pytest.mark.parametrize("mode", ["slo_aware", "tpot_first", "pdmux_static", "single"])
def test_record_tpot_feeds_the_decode_vctx_against_the_tpot_slo(env, mode):
    """A finished request's TPOT is one request on the decode vCtx, judged
    against tpot_slo_us (what sizes decode's SMs); single records nothing
    (prefill shares its vCtx), nor does a helper without a TPOT SLO; bad
    values are refused before anything is recorded."""
    m = env.mux(mode, tpot_slo_us=40_000, ttft_slo_us=300_000, name="eng")
    d = m.decode_vctx
    before = d.stats().requests
    m.record_tpot(30_000.0)
    m.record_tpot(50_000)
    st = d.stats()
    if mode == "single":
        assert st.requests == before
    else:
        assert d.slo_us == 40_000
        assert st.requests == before + 2 and st.requests_over_slo == 1
        assert m.prefill_vctx.stats().requests == 0, "TPOT is decode's, not prefill's"
    for bad, err in ((-1.0, detshare.InvalidArgumentError), (float("nan"), detshare.InvalidArgumentError),
                     (1e13, detshare.InvalidArgumentError), ("1", TypeError), (None, TypeError)):
        with pytest.raises(err):
            m.record_tpot(bad)
    assert d.stats().requests == st.requests, "a refused value records nothing"
    o = env.mux(mode, name="noslo")
    o.record_tpot(1e6)
    assert o.decode_vctx.stats().requests == 0
    m.close()
    with pytest.raises(detshare.InvalidHandleError):
        m.record_tpot(1.0)


def test_without_a_ttft_slo_prefill_stays_best_effort_and_records_nothing(env):
    m = env.mux("slo_aware", tpot_slo_us=40_000)
    assert (m.prefill_vctx.cls, m.ttft_slo_us) == (BE, 0)
    m.record_ttft(1e6)
    assert m.prefill_vctx.stats().requests == 0


@pytest.mark.parametrize("bad,err", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), (True, TypeError)])
def test_ttft_slo_is_a_u32(env, bad, err):
    with pytest.raises(err):
        PDMux(env.rt, "slo_aware", ttft_slo_us=bad)
    assert env.rt.vctxs == ()


def test_pdmux_static_groups_are_the_splits(env):
    m = env.mux("pdmux_static")
    info = env.rt.info()
    groups = m.groups
    assert len(groups) == 8 and m.group == 0
    full = info.full_pctx
    assert groups[0] == groups[-1] == (full, full)
    for (pp, dp), sms in zip(groups[1:-1], divide_sm(132, 6)):
        assert (info.pctx[pp].sm_count, info.pctx[pp].anchor) == (sms, detshare.Anchor.LOW)
        assert (info.pctx[dp].sm_count, info.pctx[dp].anchor) == (132 - sms, detshare.Anchor.HIGH)
    assert m.stats().group_changes == 0, "the first group is no change"
    m.close()
    m3 = env.mux("pdmux_static", sm_group_num=3)  # one split: [72]
    assert len(m3.groups) == 3
    assert info.pctx[m3.groups[1][0]].sm_count == 72


def test_pdmux_static_on_a_smaller_gpu_uses_the_splits_there_are():
    tiers = pool_tiers(64)
    with detshare.Runtime("sim", tiers=tiers, sim=detshare.SimConfig(sm_count=64), scheduler_period_us=-1) as rt:
        with PDMux(rt, "pdmux_static") as m:
            info = rt.info()
            assert len(m.groups) == 2 + 3  # divide_sm(64, 6) == [48, 40, 32]
            assert [info.pctx[p].sm_count for p, _ in m.groups[1:-1]] == [48, 40, 32]
            assert [info.pctx[d].sm_count for _, d in m.groups[1:-1]] == [16, 24, 32]
            # G = 5 groups: decode only is group 4, both live at most group 3
            assert m.adjust(8) == 4


def test_adjust(env):
    m = env.mux("pdmux_static")
    with pytest.raises(ValueError):
        m.adjust(-1)
    assert m.adjust(5) == 7  # decode only
    assert m.adjust() == 7  # None keeps the last batch size
    assert m.adjust(0) == 0
    assert m.stats().group_changes == 2
    for mode in ("single", "slo_aware"):
        o = env.mux(mode, name=mode)
        assert o.adjust(12) == -1 and o.adjust() == -1 and o.adjust(0) == -1
        with pytest.raises(ValueError):
            o.adjust(-1)
        assert o.stats().group_changes == 0


# ---- decode graphs -------------------------------------------------------------------


def test_decode_before_capture_and_capture_errors(env):
    m = env.mux("slo_aware")
    with pytest.raises(detshare.BusyError):
        m.decode(1)
    with pytest.raises(ValueError):
        m.decode(0)
    with pytest.raises(ValueError, match="capture_decode_raw"):
        m.capture_decode(lambda bs: None)  # PyTorch capture needs a CUDA device
    assert m.graphs == {} and m.decode_vctx.graphs == ()
    m.capture_decode_raw(env.capture)
    graphs = m.graphs
    with pytest.raises(detshare.BusyError):
        m.capture_decode_raw(env.capture)
    assert m.graphs == graphs and all(not g.closed for g in graphs.values())
    s = m.stats()
    assert s.decode_steps == 0 and s.steps_per_bucket == {} and s.decode_enqueue_us == []


@pytest.mark.parametrize("mode", ["single", "slo_aware", "pdmux_static"])
def test_capture_every_bucket_on_every_pctx(env, mode):
    m = env.mux(mode, max_batch=20)
    npctx = len(env.rt.info().pctx)
    assert npctx == 19
    m.capture_decode_raw(env.capture)
    assert m.buckets == (1, 2, 4, 8, 16, 20)
    graphs = m.graphs
    assert sorted(graphs) == list(m.buckets)
    assert set(m.decode_vctx.graphs) == set(graphs.values())
    for bs, g in graphs.items():
        assert isinstance(g, detshare.Graph) and g.vctx is m.decode_vctx
        assert g.name == f"decode-bs{bs}"
        st = g.stats()
        assert st.instantiated == tuple(range(npctx)), bs
        assert st.launches == 0
        assert all(p.kernel_nodes == 1 for p in st.pctx)
    # largest bucket first, each captured once per pCtx
    assert env.captures == [bs for bs in reversed(m.buckets) for _ in range(npctx)]
    assert env.rt.sim.trace() == [], "capturing runs nothing"
    m.graphs.clear()
    assert len(m.graphs) == len(m.buckets), "graphs is a copy"


@pytest.mark.parametrize("mode", ["single", "slo_aware", "pdmux_static"])
def test_decode_replays_the_buckets_graph(env, mode):
    m = env.mux(mode, max_batch=32)
    m.capture_decode_raw(env.capture)
    graphs = m.graphs
    ns = [1, 2, 3, 5, 8, 9, 16, 17, 23, 24, 25, 31, 32, 3, 1, 32]
    outs = [m.decode(n) for n in ns]
    m.synchronize_decode()
    assert outs == [None] * len(ns), "raw graphs have no outputs"
    per_bucket = Counter(m.bucket(n) for n in ns)
    for bs, g in graphs.items():
        st = g.stats()
        assert st.launches == per_bucket.get(bs, 0), bs
        assert sum(p.launches for p in st.pctx) == st.launches
    recs = [r for r in env.rt.sim.trace() if r.name == "dec"]
    assert [param(r) for r in recs] == [m.bucket(n) for n in ns], "each step ran its bucket's graph, in order"
    assert [r.grid[0] for r in recs] == [m.bucket(n) for n in ns]
    s = m.stats()
    assert isinstance(s, PDMuxStats)
    assert s.decode_steps == len(ns)
    assert s.steps_per_bucket == dict(per_bucket)
    assert sum(s.steps_per_bucket.values()) == s.decode_steps
    assert s.padded_slots == sum(m.bucket(n) - n for n in ns) == 28
    assert len(s.decode_enqueue_us) == len(ns)
    assert len(s.decode_step_us) == 1, "one step time per decode + synchronize_decode pair"
    assert m.decode_vctx.stats().graph_launches == len(ns)
    for bad in (0, 33):
        with pytest.raises(ValueError):
            m.decode(bad)
    assert m.stats().decode_steps == len(ns), "a refused step is not counted"
    m.reset_stats()
    s = m.stats()
    assert (s.decode_steps, s.steps_per_bucket, s.padded_slots, s.decode_enqueue_us, s.decode_step_us) == (
        0, {}, 0, [], [])


def test_inputs_run_before_the_replay_in_a_section(env):
    m = env.mux("slo_aware")
    m.capture_decode_raw(env.capture)
    k_in = env.rt.sim.kernel("inputs", 3.0, param_sizes=[4])
    seen = []

    def inputs(stream):
        seen.append((threading.get_ident(), stream))
        assert isinstance(stream, int) and stream != 0
        env.rt.sim.launch_on_stream(stream, k_in, 4, 32, [ctypes.c_int(len(seen))])

    sections = m.decode_vctx.stats().sections
    for n in (3, 7, 12):
        m.decode(n, inputs=inputs)
        m.synchronize_decode()
    assert [t for t, _ in seen] == [threading.get_ident()] * 3, "on the scheduler thread"
    assert m.decode_vctx.stats().sections == sections + 3
    recs = env.rt.sim.trace()
    assert [(r.name, param(r)) for r in recs] == [("inputs", 1), ("dec", 4), ("inputs", 2), ("dec", 8),
                                                  ("inputs", 3), ("dec", 16)]
    for a, b in zip(recs, recs[1:]):
        assert b.start_us >= a.end_us, "the replay runs after the inputs' work"
    s = m.stats()
    assert len(s.decode_enqueue_us) == len(s.decode_step_us) == 3


def test_decode_times(env):
    m = env.mux("single")
    m.capture_decode_raw(env.capture)
    m.synchronize_decode()  # no decode before it: no sample
    assert m.stats().decode_step_us == []
    for i in range(4):
        m.decode(1 + i)
        if i == 2:
            time.sleep(0.02)  # the step time runs from decode() to synchronize_decode()'s return
        m.synchronize_decode()
    m.synchronize_decode()  # nothing since the last: no sample
    s = m.stats()
    assert len(s.decode_enqueue_us) == len(s.decode_step_us) == 4
    assert all(e > 0 for e in s.decode_enqueue_us)
    assert all(st >= e for st, e in zip(s.decode_step_us, s.decode_enqueue_us))
    assert s.decode_step_us[2] >= 20_000 > s.decode_enqueue_us[2]
    m.decode(1)  # two steps, one synchronize: one step time, from the second
    time.sleep(0.05)
    m.decode(1)
    m.synchronize_decode()
    s = m.stats()
    assert len(s.decode_enqueue_us) == 6 and len(s.decode_step_us) == 5
    assert s.decode_step_us[-1] < 50_000
    s.decode_step_us.clear()
    s.steps_per_bucket.clear()
    assert len(m.stats().decode_step_us) == 5 and m.stats().steps_per_bucket, "stats() is a copy"


def test_capture_function_raising(env):
    m = env.mux("slo_aware", max_batch=32)
    made = []

    def capture(bs, stream):
        if bs == 8:
            made.extend(m.graphs.values())  # what was captured before this bucket
            raise Boom("bucket 8")
        env.capture(bs, stream)

    with pytest.raises(Boom, match="bucket 8") as ei:
        m.capture_decode_raw(capture)
    assert isinstance(ei.value.__cause__, detshare.CaptureError)
    assert len(made) == 3 and all(g.closed for g in made), "32, 24 and 16 were closed again"
    assert m.graphs == {} and m.decode_vctx.graphs == ()
    with pytest.raises(detshare.BusyError):
        m.decode(1)


def test_capture_function_failing(env):
    m = env.mux("slo_aware", max_batch=32)
    with pytest.raises(detshare.CaptureError) as ei:
        m.capture_decode_raw(lambda bs, s: 9 if bs == 1 else env.capture(bs, s))  # a nonzero return
    assert ei.value.__cause__ is None
    assert m.graphs == {} and m.decode_vctx.graphs == ()
    m.capture_decode_raw(env.capture)  # a later capture works
    assert sorted(m.graphs) == list(m.buckets)
    m.decode(5)
    m.synchronize_decode()
    assert m.graphs[8].stats().launches == 1


# ---- prefill -------------------------------------------------------------------------


def test_single_prefill_runs_on_the_calling_thread(env):
    m = env.mux("single")
    k = env.rt.sim.kernel("pre", 5.0)
    seen = []

    def chunk(stream):
        seen.append((threading.get_ident(), stream, m.prefill_live))
        env.rt.sim.launch_on_stream(stream, k, 132, 32)
        return "tok"

    t = m.prefill(chunk)
    assert isinstance(t, PrefillTicket) and t.done() and t.wait(0)
    assert t.result(timeout=0) == "tok"
    assert seen == [(threading.get_ident(), seen[0][1], 1)] and isinstance(seen[0][1], int)
    assert m.prefill_live == 0
    assert t.submitted_s <= t.started_s <= t.finished_s
    assert m.prefill_vctx.stats().sections == 1
    bad = m.prefill(lambda s: (_ for _ in ()).throw(Boom("chunk")))
    assert bad.done()
    with pytest.raises(Boom, match="chunk"):
        bad.result()
    s = m.stats()
    assert (s.prefills, s.prefill_errors) == (2, 1)
    m.synchronize_decode()
    assert [r.name for r in env.rt.sim.trace()] == ["pre"]


def test_prefill_on_the_worker_in_order(real):
    m = real.mux("slo_aware")
    main = threading.get_ident()
    k = real.rt.sim.kernel("pre", 5.0)
    order = []

    def chunk(i):
        def fn(stream):
            order.append((i, threading.get_ident(), stream))
            real.rt.sim.launch_on_stream(stream, k, 132, 32)
            time.sleep(0.002)
            if i == 2:
                raise Boom(f"chunk {i}")
            return i * 10
        return fn

    tickets = [m.prefill(chunk(i)) for i in range(6)]
    for i, t in enumerate(tickets):
        if i == 2:
            with pytest.raises(Boom, match="chunk 2"):
                t.result(timeout=WAIT_S)
        else:
            assert t.result(timeout=WAIT_S) == i * 10
    assert [i for i, _, _ in order] == list(range(6)), "submission order"
    workers = {tid for _, tid, _ in order}
    assert len(workers) == 1 and main not in workers, "one worker thread, not the caller"
    assert all(isinstance(s, int) and s for _, _, s in order)
    for a, b in zip(tickets, tickets[1:]):
        assert a.finished_s <= b.started_s, "one chunk at a time"
    for t in tickets:
        assert t.submitted_s <= t.started_s <= t.finished_s
    s = m.stats()
    assert (s.prefills, s.prefill_errors) == (6, 1)
    assert m.prefill_live == 0
    assert m.prefill_vctx.stats().sections == 6 and m.decode_vctx.stats().sections == 0


def test_prefill_live_and_ticket_waits(real):
    m = real.mux("tpot_first")
    go, started = real.event(), real.event()

    def blocking(stream):
        started.set()
        assert go.wait(WAIT_S)
        return "a"

    a = m.prefill(blocking)
    b = m.prefill(lambda s: "b")
    c = m.prefill(lambda s: "c")
    assert started.wait(WAIT_S)
    assert m.prefill_live == 3
    assert not a.done() and not b.done() and not a.wait(0.01)
    with pytest.raises(TimeoutError):
        a.result(timeout=0.01)
    assert a.finished_s is None and b.started_s is None
    assert m.stats().prefills == 0
    go.set()
    assert c.result(timeout=WAIT_S) == "c"
    assert (a.result(0), b.result(0)) == ("a", "b")
    assert m.prefill_live == 0 and m.stats().prefills == 3


def test_prefill_errors(real):
    m = real.mux("slo_aware")
    with pytest.raises(TypeError):
        m.prefill(42)
    with pytest.raises(TypeError):
        m.prefill(None)
    assert m.prefill_live == 0 and m.stats().prefills == 0
    m.close()
    with pytest.raises(detshare.InvalidHandleError):
        m.prefill(lambda s: None)
    with pytest.raises(detshare.InvalidHandleError):
        m.capture_decode_raw(real.capture)
    s = real.mux("single", name="one")
    s.close()
    with pytest.raises(detshare.InvalidHandleError):
        s.prefill(lambda st: None)


def test_prefill_records_the_batch_size_before_regrouping(real):
    m = real.mux("pdmux_static", max_batch=64)
    with pytest.raises(ValueError):
        m.prefill(lambda s: None, decode_bs=-1)
    assert m.prefill_live == 0 and m.group == 0, "a refused chunk changes nothing"
    go, started = real.event(), real.event()

    def blocking(stream):
        started.set()
        assert go.wait(WAIT_S)

    t = m.prefill(blocking, decode_bs=36)  # SGLang's first event, with the batch's size now
    assert m.group == pdmux_group(8, 36, True) == 6
    assert started.wait(WAIT_S)
    go.set()
    t.result(WAIT_S)
    assert m.group == pdmux_group(8, 36, False) == 7, "the chunk's end re-chose with the recorded size"


def test_decode_goes_on_while_a_chunk_runs(real):
    m = real.mux("slo_aware")
    m.capture_decode_raw(real.capture)
    go, started = real.event(), real.event()

    def blocking(stream):
        started.set()
        assert go.wait(WAIT_S)
        return 1

    t = m.prefill(blocking)
    assert started.wait(WAIT_S)
    for n in range(1, 11):
        m.decode(n)
        m.synchronize_decode()
    assert not t.done() and m.stats().decode_steps == 10
    go.set()
    assert t.result(WAIT_S) == 1


# ---- pdmux_static's groups -----------------------------------------------------------


def test_pdmux_static_follows_the_batch(real):
    rt = real.rt
    m = real.mux("pdmux_static", max_batch=32)
    groups = m.groups
    G = len(groups)
    assert G == 8
    sms = {p.index: rt.probe_sms(p.index) for p in rt.info().pctx}
    m.capture_decode_raw(real.capture)
    rt.sim.trace_clear()
    pre = rt.sim.kernel("pre", 5.0)
    state = dict(bs=0, live=0, changes=0, last=0)
    inside = {}

    def expect(g):
        want = pdmux_group(G, state["bs"], state["live"] > 0)
        assert want == g, (state, g)
        assert m.group == g, (state, m.group)
        if g != state["last"]:
            state["changes"] += 1
            state["last"] = g
        assert m.stats().group_changes == state["changes"]

    def decode(n, g):
        state["bs"] = n
        before = m.group
        m.decode(n)
        m.synchronize_decode()
        assert m.group == before, "decode() records the batch size; it does not re-choose the group"
        m.adjust()  # re-choose with the recorded size
        expect(g)
        m.decode(n)  # the next kernel runs on the group's pCtx
        m.synchronize_decode()
        assert m.decode_vctx.pctx == groups[g][1], f"decode bound to group {g}'s decode pCtx"
        rec = [r for r in rt.sim.trace() if r.name == "dec"][-1]
        assert param(rec) == m.bucket(n) and rec.sms <= sms[groups[g][1]]

    def chunk(name, go, started):
        def fn(stream):
            inside[name] = m.prefill_vctx.pctx
            rt.sim.launch_on_stream(stream, pre, 132, 32, None)
            started.set()
            assert go.wait(WAIT_S)
            return name
        return fn

    expect(m.adjust())  # idle: 0
    decode(4, 7)  # decode only: the whole GPU
    assert groups[7][1] == rt.info().full_pctx
    go_a, started_a = real.event(), real.event()
    state["live"] += 1
    a = m.prefill(chunk("a", go_a, started_a))
    expect(1)  # 4 * 6 // 36 = 0 -> at least 1
    assert started_a.wait(WAIT_S)
    assert inside["a"] == groups[1][0], "the chunk's section opened on group 1's prefill pCtx"
    decode(12, 2)
    decode(32, 5)
    state["bs"] = 100
    assert m.adjust(100) == 6
    expect(6)
    assert m.decode_vctx.pctx == groups[5][1], "not moved before its next kernel"
    go_b, started_b = real.event(), real.event()
    state["live"] += 1
    b = m.prefill(chunk("b", go_b, started_b))
    expect(6)  # a second chunk: no change
    go_a.set()
    assert a.result(WAIT_S) == "a"
    state["live"] -= 1
    expect(6)  # b still live
    assert started_b.wait(WAIT_S)
    assert inside["b"] == groups[6][0]
    assert m.prefill_live == 1
    decode(1, 1)
    state["bs"] = 0
    assert m.adjust(0) == 0  # the running batch emptied: prefill only
    expect(0)
    decode(24, 4)
    go_b.set()
    assert b.result(WAIT_S) == "b"
    state["live"] -= 1
    expect(7)  # the chunk ended: decode only
    state["bs"] = 0
    expect(m.adjust(0))
    assert m.group == 0
    s = m.stats()
    assert s.group_changes == state["changes"] == 10
    assert s.prefills == 2 and s.decode_steps == 10  # two per decode() above
    m.close()  # the vCtxs' work is done now
    recs = {r.seq: r for r in rt.sim.trace() if r.name == "pre"}
    a_rec, b_rec = sorted(recs.values(), key=lambda r: r.seq)
    assert a_rec.sms == sms[groups[1][0]] and len(a_rec.sms) == 112, "chunk a ran on group 1's 112 SMs"
    assert b_rec.sms == sms[groups[6][0]] and len(b_rec.sms) == 72, "chunk b ran on group 6's 72 SMs"


# ---- close ---------------------------------------------------------------------------


def test_close_waits_for_queued_chunks_and_destroys_everything(real):
    m = real.mux("slo_aware")
    m.capture_decode_raw(real.capture)
    graphs = list(m.graphs.values())
    p, d = m.prefill_vctx, m.decode_vctx
    m.decode(3)
    go = real.event()
    done = []

    def chunk(i):
        def fn(stream):
            if i == 0:
                assert go.wait(WAIT_S)
            time.sleep(0.002)
            done.append(i)
            return i
        return fn

    tickets = [m.prefill(chunk(i)) for i in range(4)]
    timer = threading.Timer(0.05, go.set)
    timer.start()
    try:
        m.close()
    finally:
        timer.cancel()
    assert done == [0, 1, 2, 3], "close() ran every queued chunk first"
    assert all(t.done() and t.result(0) == i for i, t in enumerate(tickets))
    assert m.closed and p.closed and d.closed
    assert all(g.closed for g in graphs) and m.graphs == {}
    assert real.rt.vctxs == ()
    assert m.stats().prefills == 4
    m.close()  # idempotent
    assert m.closed


def test_close_single_and_context_manager(env):
    with env.mux("single") as m:
        m.capture_decode_raw(env.capture)
        graphs = list(m.graphs.values())
        v = m.decode_vctx
        m.decode(2)
    assert m.closed and v.closed and all(g.closed for g in graphs)
    assert env.rt.vctxs == () and "closed" in repr(m)
    m.close()
    with pytest.raises(Boom):
        with env.mux("pdmux_static", name="cm") as m2:
            assert "cm-prefill" in {t.name for t in threading.enumerate()}
            raise Boom()
    assert m2.closed and m2.prefill_vctx.closed and m2.decode_vctx.closed
    assert "cm-prefill" not in {t.name for t in threading.enumerate()}, "the prefill worker stopped"
    assert env.rt.vctxs == ()


def test_close_after_the_runtime_closed():
    e = Env("virtual")
    m = e.mux("slo_aware")
    m.capture_decode_raw(e.capture)
    graphs = list(m.graphs.values())
    e.rt.close()  # destroys the vCtxs and their graphs
    m.close()  # nothing left to destroy; must not raise
    assert m.closed and all(g.closed for g in graphs)
    e.muxes.clear()
    e.close()


# ---- device faults -------------------------------------------------------------------


def faulting_chunk(env, go, probe):
    """A chunk that launches a faulting kernel and returns once the runtime has
    seen the fault (a remap of another vCtx reports it)."""
    bad = env.rt.sim.kernel("bad", 5.0, faults=True)

    def fn(stream):
        assert go.wait(WAIT_S)
        env.rt.sim.launch_on_stream(stream, bad, 1, 32)
        end = time.perf_counter() + WAIT_S
        while time.perf_counter() < end:
            try:
                probe.remap(0)
            except detshare.DeviceFaultError:
                return 1
            time.sleep(0.001)
        raise AssertionError("the simulated fault was never reported")

    return fn


def close_faulted(env):
    for e in env.events:
        e.set()
    for x in env.muxes + [env.rt]:
        try:
            x.close()
        except detshare.DeviceFaultError:
            pass


def test_device_fault_at_a_chunks_end_still_finishes_its_ticket():
    """The remap at the end of a chunk (pdmux_static's group change) fails on a
    faulted device; the chunk's ticket must still finish, with the error."""
    e = Env("realtime")
    try:
        m = e.mux("pdmux_static")
        probe = e.rt.vctx("probe")
        go = e.event()
        t = m.prefill(faulting_chunk(e, go, probe))
        assert m.adjust(12) == 2  # both live: the chunk's end changes the group to 7
        go.set()
        assert t.wait(2.0), "the ticket never finished: result() without a timeout would hang"
        with pytest.raises(detshare.DeviceFaultError):
            t.result(0)
        assert m.prefill_live == 0
        s = m.stats()
        assert (s.prefills, s.prefill_errors) == (1, 1)
    finally:
        close_faulted(e)


def test_close_after_a_device_fault_destroys_both_vctxs():
    e = Env("realtime")
    try:
        m = e.mux("slo_aware")
        m.capture_decode_raw(e.capture)
        graphs = list(m.graphs.values())
        probe = e.rt.vctx("probe")
        go = e.event()
        t = m.prefill(faulting_chunk(e, go, probe))
        go.set()
        assert t.wait(WAIT_S)
        with pytest.raises(detshare.DeviceFaultError):
            t.result(0)  # the section's end reported the fault
        try:
            m.close()  # may report the fault; destroys everything anyway
        except detshare.DeviceFaultError:
            pass
        assert m.closed
        assert m.prefill_vctx.closed and m.decode_vctx.closed, "close() left a vCtx alive"
        assert all(g.closed for g in graphs) and m.graphs == {}
        assert e.rt.vctxs == (probe,)
    finally:
        close_faulted(e)


# ---- RequestStats --------------------------------------------------------------------


def test_request_stats_ttft_tpot():
    rs = RequestStats()
    rs.arrive("a", t=10.0)
    rs.arrive("b", t=10.5)
    rs.arrive(3, t=11.0)
    assert len(rs) == 3
    rs.tokens("a", t=10.25)  # first token: TTFT 0.25
    rs.tokens("a", n=4, t=11.25)  # 5 tokens over 1 s after the first: TPOT 0.25
    rs.tokens("b", n=1, t=12.5)  # one token: TTFT 2.0, no TPOT
    assert rs.ttft_s() == {"a": 0.25, "b": 2.0}
    assert rs.tpot_s() == {"a": 0.25}
    rs.tokens(3, n=2, t=11.5)  # two tokens at once: TPOT 0 over the one after the first
    assert rs.tpot_s() == {"a": 0.25, 3: 0.0}
    rs.tokens(3, t=11.5)  # same time as the previous: allowed
    rs.tokens(3, n=3, t=12.5)  # 6 tokens, the first at 11.5: TPOT 1.0 / 5
    assert rs.tpot_s()[3] == pytest.approx(0.2)
    assert rs.ttft_s()[3] == 0.5, "the first token's time stays"
    # one request's TPOT so far, as tpot_s gives it; None before its second token or unknown
    assert {r: rs.tpot_s_of(r) for r in ("a", 3)} == rs.tpot_s()
    assert rs.tpot_s_of("b") is None and rs.tpot_s_of("nobody") is None


def test_request_stats_default_times():
    rs = RequestStats()
    t0 = time.perf_counter()
    rs.arrive("x")
    rs.tokens("x")
    rs.tokens("x", 2)
    t1 = time.perf_counter()
    assert 0 <= rs.ttft_s()["x"] <= t1 - t0
    assert 0 <= rs.tpot_s()["x"] <= (t1 - t0) / 2


def test_request_stats_summary_with_slos():
    rs = RequestStats()
    # r0: TTFT 125 ms, TPOT 20 ms      -> good
    # r1: TTFT 625 ms, TPOT 7.8 ms     -> TTFT violation
    # r2: TTFT 250 ms, TPOT 46.9 ms    -> TPOT violation
    # r3: TTFT 500 ms (equal: meets), one token, no TPOT -> good
    # r4: no token                     -> TTFT violation
    times = {0: (0.0, 0.125, 0.125 + 4 * 0.02, 5), 1: (0.5, 1.125, 1.125 + 8 * 0.0078125, 9),
             2: (1.0, 1.25, 1.25 + 2 * 0.046875, 3), 3: (1.5, 2.0, 2.0, 1)}
    for r, (arr, first, last, n) in times.items():
        rs.arrive(r, t=arr)
        rs.tokens(r, t=first)
        if n > 1:
            rs.tokens(r, n=n - 1, t=last)
    rs.arrive(4, t=2.5)
    ttft = rs.ttft_s()
    assert ttft == {0: 0.125, 1: 0.625, 2: 0.25, 3: 0.5}
    tpot = rs.tpot_s()
    assert set(tpot) == {0, 1, 2}
    assert tpot[1] == 0.0078125 and tpot[2] == 0.046875 and tpot[0] == pytest.approx(0.02)

    s = rs.summary(ttft_slo_ms=500, tpot_slo_ms=25, duration_s=4.0)
    assert s["requests"] == 5 and s["completed"] == 4
    assert s["ttft_slo_violation"] == 2 / 5  # r1, and r4 without a token
    assert s["tpot_slo_violation"] == 1 / 5  # r2
    assert s["slo_attainment"] == 2 / 5  # r0, r3
    assert s["goodput_rps"] == 2 / 4.0
    assert s["throughput_rps"] == 4 / 4.0
    assert s["duration_s"] == 4.0
    # nearest rank over [125, 250, 500, 625] ms and [7.8125, 20, 46.875] ms
    assert s["ttft_p50_ms"] == 250 and s["ttft_p99_ms"] == 625
    assert s["tpot_p50_ms"] == pytest.approx(20) and s["tpot_p99_ms"] == 46.875

    none = rs.summary()  # no SLOs: only the request without a token misses
    assert none["ttft_slo_violation"] == 1 / 5 and none["tpot_slo_violation"] == 0
    assert none["slo_attainment"] == 4 / 5
    # default duration: the first arrival (0.0) to the last token (r3's, at 2.0)
    last = max(t[2] for t in times.values())
    assert last == 2.0 and none["duration_s"] == last
    assert none["goodput_rps"] == 4 / last and none["throughput_rps"] == 4 / last
    tight = rs.summary(ttft_slo_ms=100, tpot_slo_ms=5, duration_s=0)
    assert tight["slo_attainment"] == 0 and math.isnan(tight["goodput_rps"])


def test_request_stats_empty_and_tokenless():
    s = RequestStats().summary(ttft_slo_ms=1, tpot_slo_ms=1)
    assert s["requests"] == 0 and s["completed"] == 0 and s["duration_s"] == 0
    for k in ("ttft_p50_ms", "tpot_p99_ms", "slo_attainment", "ttft_slo_violation", "goodput_rps"):
        assert math.isnan(s[k]), k
    rs = RequestStats()
    rs.arrive("q", t=1.0)
    s = rs.summary()
    assert s["requests"] == 1 and s["completed"] == 0
    assert s["ttft_slo_violation"] == 1.0 and s["slo_attainment"] == 0.0
    assert math.isnan(s["ttft_p50_ms"])


def test_request_stats_errors():
    rs = RequestStats()
    rs.arrive("a", t=5.0)
    with pytest.raises(ValueError):
        rs.arrive("a", t=6.0)
    with pytest.raises(KeyError):
        rs.tokens("nobody", t=6.0)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            rs.tokens("a", n=bad, t=6.0)
    with pytest.raises(ValueError):
        rs.tokens("a", t=4.0)  # before its arrival
    rs.tokens("a", t=6.0)
    with pytest.raises(ValueError):
        rs.tokens("a", t=5.5)  # before its previous token
    assert rs.ttft_s() == {"a": 1.0} and rs.tpot_s() == {}, "refused calls change nothing"
    rs.tokens("a", t=7.0)
    assert rs.tpot_s() == {"a": 1.0}


def test_request_stats_threads():
    rs = RequestStats()

    def client(base):
        for i in range(200):
            rid = base + i
            rs.arrive(rid, t=float(i))
            rs.tokens(rid, t=i + 0.5)
            rs.tokens(rid, n=3, t=i + 2.0)

    threads = [threading.Thread(target=client, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(rs) == 800
    assert set(rs.ttft_s().values()) == {0.5} and set(rs.tpot_s().values()) == {0.5}


def test_percentile():
    assert math.isnan(percentile([], 50))
    xs = list(range(1, 11))  # nearest rank: the ceil(q*n/100)-th smallest
    assert percentile(xs, 50) == 5
    assert percentile(xs, 51) == 6
    assert percentile(xs, 90) == 9
    assert percentile(xs, 99) == 10
    assert percentile(xs, 100) == 10
    assert percentile(xs, 0) == 1
    assert percentile(xs, 10) == 1 and percentile(xs, 11) == 2
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0, "unsorted input"
    assert percentile([7.5], 99) == 7.5
    hundred = list(range(100, 0, -1))
    assert percentile(hundred, 99) == 99 and percentile(hundred, 1) == 1 and percentile(hundred, 50) == 50

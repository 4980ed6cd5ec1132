"""Runtime and vCtx objects: creation, attributes, queries, context managers,
destruction and what happens to handles afterwards."""

from __future__ import annotations

import gc

import pytest

import detshare

from conftest import make_rt


def test_runtime_context_manager_and_close():
    with detshare.Runtime("sim") as rt:
        assert not rt.closed
        assert isinstance(rt.handle, int) and rt.handle != 0
        assert "sim" in repr(rt)
    assert rt.closed
    rt.close()  # idempotent
    with pytest.raises(detshare.InvalidHandleError):
        rt.handle


def test_bad_device_name():
    with pytest.raises(ValueError, match="cuda"):
        detshare.Runtime("gpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        detshare.Runtime("cuda", sim=detshare.SimConfig())


def test_runtime_info_on_the_simulated_device():
    with detshare.Runtime("sim", sim=detshare.SimConfig(sm_count=132)) as rt:
        info = rt.info()
    assert info.device == "sim"
    assert info.sm_count == 132 and info.driver_version == 0
    assert info.min_partition_sms == 8
    assert sum(info.group_sm_counts) == 132
    assert [p.index for p in info.pctx] == list(range(len(info.pctx)))
    full = info.pctx[info.full_pctx]
    assert full.anchor == detshare.Anchor.FULL and full.sm_count == 132
    for p in info.pctx:
        if p.complement is not None:
            c = info.pctx[p.complement]
            assert p.sm_count + c.sm_count == 132
            assert set(p.groups).isdisjoint(c.groups)


def test_explicit_tiers():
    tiers = [detshare.Tier(0, "full"), (24, "low"), detshare.Tier(100, detshare.Anchor.HIGH)]
    with detshare.Runtime("sim", tiers=tiers) as rt:
        pool = rt.info().pctx
    assert [(p.sm_count, p.anchor) for p in pool] == [
        (132, detshare.Anchor.FULL),
        (24, detshare.Anchor.LOW),
        (100, detshare.Anchor.HIGH),
    ]
    with pytest.raises(ValueError, match="Anchor"):
        detshare.Runtime("sim", tiers=[(8, "middle")])


def test_vctx_attributes_and_stats():
    with make_rt("manual") as rt:
        v = rt.vctx("tenant-a", cls="ls", priority=3, slo_us=500, weight=2, phase="decode")
        assert v.name == "tenant-a"
        assert v.cls is detshare.VCtxClass.LATENCY_SENSITIVE
        assert v.phase is detshare.Phase.DECODE
        assert (v.priority, v.slo_us, v.weight) == (3, 500, 2)
        assert v in rt.vctxs
        assert v.pctx == rt.info().full_pctx
        k = rt.sim.kernel("k", 5.0)
        for _ in range(10):
            v.launch(k, 4, 128)
        with v.section():
            pass
        v.synchronize()
        st = v.stats()
        assert isinstance(st, detshare.VCtxStats)
        assert (st.launches, st.sections, st.remaps, st.streams) == (10, 1, 0, 1)
        assert st.urgent is False
        v.close()
        assert v.closed and v not in rt.vctxs


def test_default_names_are_unique_and_classes_parse(rt):
    a, b = rt.vctx(), rt.vctx()
    assert a.name and b.name and a.name != b.name
    assert rt.vctx(cls="best_effort").cls is detshare.VCtxClass.BEST_EFFORT
    assert rt.vctx(cls=detshare.VCtxClass.LATENCY_SENSITIVE).cls == 1
    assert rt.vctx(cls=1).cls is detshare.VCtxClass.LATENCY_SENSITIVE
    with pytest.raises(ValueError, match="VCtxClass"):
        rt.vctx(cls="urgent")


def test_vctx_context_manager(rt):
    with rt.vctx("scoped") as v:
        assert not v.closed
    assert v.closed


def test_runtime_close_destroys_its_vctxs_after_their_work():
    rt = make_rt()
    k = rt.sim.kernel("k", 1000.0)
    v = rt.vctx("busy")
    for _ in range(5):
        v.launch(k, 264, 64)
    sim = rt.sim
    rt.close()
    assert v.closed
    with pytest.raises(detshare.InvalidHandleError):
        v.synchronize()
    with pytest.raises(detshare.InvalidHandleError):
        sim.trace()


def test_vctx_destroy_waits_for_in_flight_work(rt):
    k = rt.sim.kernel("k", 1000.0)
    v = rt.vctx("busy")
    for _ in range(5):
        v.launch(k, 264, 64)
    v.close()
    recs = rt.sim.trace()
    assert len(recs) == 5 and all(r.end_us >= 0 for r in recs)
    assert rt.sim.now_us() >= 5 * 2 * 1000.0


def test_unclosed_runtime_warns_and_is_destroyed():
    rt = detshare.Runtime("sim")
    with pytest.warns(ResourceWarning):
        del rt
        gc.collect()


def test_many_runtimes_do_not_interfere():
    for _ in range(10):
        with detshare.Runtime("sim") as a, detshare.Runtime("sim", sim=detshare.SimConfig(sm_count=64)) as b:
            va, vb = a.vctx(), b.vctx()
            va.launch(a.sim.kernel("ka", 50.0), 132, 32)
            vb.launch(b.sim.kernel("kb", 50.0), 64, 32)
            va.synchronize()
            vb.synchronize()
            assert b.info().sm_count == 64


def test_library_version_and_path():
    import re

    from conftest import REPO_ROOT

    project = re.search(r"version: '(\d+)\.(\d+)\.(\d+)'", (REPO_ROOT / "meson.build").read_text())
    want = tuple(int(x) for x in project.groups())
    assert detshare.library_version() == want  # the library as built
    assert tuple(int(x) for x in detshare.__version__.split(".")) == want  # the package as installed
    pyproject = (REPO_ROOT / "bindings" / "python" / "pyproject.toml").read_text()
    assert re.search(r'^version = "(.*)"', pyproject, re.M).group(1) == detshare.__version__
    assert detshare.library_path().name.startswith("libdetshare.so")


def test_log_handler_receives_library_messages():
    lines = []
    detshare.set_log_handler(lambda lvl, msg: lines.append((lvl, msg)), detshare.LogLevel.INFO)
    try:
        with detshare.Runtime("sim") as rt:
            with pytest.raises(detshare.NotFoundError):
                rt.set_policy("nope")
    finally:
        detshare.set_log_handler(None)
    assert any(lvl == detshare.LogLevel.INFO and "runtime on" in m for lvl, m in lines), lines
    assert any(lvl == detshare.LogLevel.ERROR and "nope" in m for lvl, m in lines), lines
    n = len(lines)
    with detshare.Runtime("sim"):
        pass
    assert len(lines) == n, "after set_log_handler(None) nothing is delivered"


def test_probe_sms_matches_each_pctx(rt):
    for p in rt.info().pctx:
        sms = rt.probe_sms(p.index)
        assert len(sms) == p.sm_count
    with pytest.raises(detshare.InvalidArgumentError):
        rt.probe_sms(99)

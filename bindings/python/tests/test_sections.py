"""Sections on the simulated device: order with launches (read from the
trace), remaps only between sections, what a section yields."""

from __future__ import annotations

import sys
import types

import pytest

from conftest import make_rt


def test_section_is_ordered_with_launches(rt):
    long_k = rt.sim.kernel("before", 500.0)
    lib_k = rt.sim.kernel("in_section", 100.0)
    after_k = rt.sim.kernel("after", 10.0)
    v = rt.vctx("v")
    v.launch(long_k, 132, 64)
    with v.section() as s:
        assert isinstance(s, int) and s != 0
        rt.sim.launch_on_stream(s, lib_k, 264, 64)
        rt.sim.launch_on_stream(s, lib_k, 1, 32)
    v.launch(after_k, 1, 32)
    v.synchronize()
    recs = rt.sim.trace()
    assert [r.name for r in recs] == ["before", "in_section", "in_section", "after"]
    for prev, nxt in zip(recs, recs[1:]):
        assert nxt.start_us >= prev.end_us, f"{nxt.name} started before {prev.name} ended"
    assert len({r.stream for r in recs}) == 1
    st = v.stats()
    assert st.sections == 1 and st.launches == 2


def test_remap_waits_for_the_section_and_keeps_order():
    with make_rt("manual") as rt:
        info = rt.info()
        low16 = next(p.index for p in info.pctx if p.sm_count == 16)
        k = rt.sim.kernel("k", 300.0)
        v = rt.vctx("v")
        with v.section() as s0:
            rt.sim.launch_on_stream(s0, k, 264, 64)
            v.remap(low16)  # requested inside the section: applied after it
            assert v.pctx == info.full_pctx
        with v.section() as s1:
            assert v.pctx == low16
            assert s1 != s0
            rt.sim.launch_on_stream(s1, k, 16, 64)
        v.synchronize()
        a, b = rt.sim.trace()
        assert len(a.sms) == 132 and b.sms <= set(range(64)) and len(b.sms) == 16
        assert b.start_us >= a.end_us, "the new stream waited for the old one"
        assert v.stats().remaps == 1


def test_section_closes_on_exception(rt):
    v = rt.vctx("v")
    with pytest.raises(RuntimeError):
        with v.section():
            raise RuntimeError("boom")
    with v.section():
        pass
    assert v.stats().sections == 2


def test_section_stream_kinds(rt):
    v = rt.vctx("v")
    with v.section("raw") as s:
        assert isinstance(s, int)
    with pytest.raises(ValueError, match="CUDA"):
        with v.section("torch"):
            pass
    with pytest.raises(ValueError):
        with v.section("cupy"):  # type: ignore[arg-type]
            pass


class _FakeExternalStream:
    def __init__(self, ptr, device=None):
        self.cuda_stream = ptr
        self.device = device


def _fake_torch():
    torch = types.ModuleType("torch")
    torch.device = lambda kind, index: (kind, index)  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(ExternalStream=_FakeExternalStream)  # type: ignore[attr-defined]
    return torch


def test_auto_yields_an_external_stream_only_on_cuda_with_torch_loaded(rt, monkeypatch):
    """What a section yields on a CUDA runtime, checked without a GPU: the
    binding's wrapping logic with a stand-in torch module."""
    v = rt.vctx("v")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(rt, "device", "cuda")  # the wrapping logic only; the stream is the sim's
    with v.section() as s:
        assert isinstance(s, int), "torch not imported: the raw CUstream"
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    with v.section() as s:
        assert isinstance(s, _FakeExternalStream)
        raw = s.cuda_stream
        assert s.device == ("cuda", 0)
    with v.section() as s2:
        assert s2 is s, "one ExternalStream per underlying stream"
    with v.section("raw") as r:
        assert r == raw


def test_sim_without_torch_never_imports_it(rt):
    had = "torch" in sys.modules
    v = rt.vctx("v")
    with v.section():
        pass
    assert ("torch" in sys.modules) == had

"""Graph segments through the binding (VCtx.graph_raw(segment_us=...),
detshare.graph_cut(), Graph.segment/segments, VCtx.graph_from_cuda_graphs,
ds_graph_cut / ds_graph_get_segment): explicit cuts make pieces, the automatic
cut splits a measured step into segments on the simulated device, the output
stays the same kernels in the same order, and bad input is refused with the
binding's or the library's errors. VCtxStats' yield fields are read."""

from __future__ import annotations

import ctypes
import threading

import pytest

import detshare
from detshare import _types as T

from conftest import make_rt


def rec_id(r):
    return int.from_bytes(r.params[:4], "little", signed=True)


class Step:
    """A capture function: `nk` kernels of `blocks` blocks with an int
    parameter 0..nk-1 (seen in the trace), and a cut after every `cut_every`
    of them (0: none) through detshare.graph_cut(), with the stream given
    (`pass_stream`) or found by the binding."""

    def __init__(self, rt, nk=6, blocks=132, block_us=20.0, cut_every=0, pass_stream=False):
        self.rt = rt
        self.k = rt.sim.kernel("seg", block_us, param_sizes=[4])
        self.nk = nk
        self.blocks = blocks
        self.cut_every = cut_every
        self.pass_stream = pass_stream
        self.calls = 0

    def __call__(self, stream):
        self.calls += 1
        for i in range(self.nk):
            self.rt.sim.launch_on_stream(stream, self.k, self.blocks, 128, [ctypes.c_int(i)])
            if self.cut_every and (i + 1) % self.cut_every == 0:
                detshare.graph_cut(stream if self.pass_stream else None)


def test_constants_and_exports():
    assert detshare.GRAPH_SEGMENT_MIN_US == T.DS_GRAPH_SEGMENT_MIN_US == 100
    assert detshare.GRAPH_SEGMENT_MAX_US == T.DS_GRAPH_SEGMENT_MAX_US == 10_000_000
    assert detshare.GRAPH_MAX_SEGMENTS == T.DS_GRAPH_MAX_SEGMENTS == 4096
    for name in ("graph_cut", "GraphSegment", "GRAPH_SEGMENT_MIN_US"):
        assert name in detshare.__all__
    s = T.ds_graph_segment()  # DS_GRAPH_SEGMENT_INIT
    assert (s.size, s.magic, s.version) == (424, T.DS_ABI_MAGIC, T.DS_ABI_VERSION)
    a = T.ds_graph_attr()
    assert a.segment_us == 0


@pytest.mark.parametrize("pass_stream", [False, True], ids=["found", "given"])
def test_explicit_cuts_make_pieces_in_program_order(pass_stream):
    rt = make_rt("manual")
    n = len(rt.info().pctx)
    st = Step(rt, nk=6, cut_every=2, pass_stream=pass_stream)
    v = rt.vctx("v")
    g = v.graph_raw(st, name="cut")
    s = g.stats()
    assert (s.pieces, s.segments, s.segment_us, s.uncut) == (3, 3, 0, "none")
    segs = g.segments()
    assert len(segs) == 3 and all(isinstance(x, detshare.GraphSegment) for x in segs)
    assert [x.piece for x in segs] == [0, 1, 2] and [x.index for x in segs] == [0, 1, 2]
    assert [(x.nodes, x.kernel_nodes) for x in segs] == [(2, 2)] * 3
    assert all(len(x.measured_us) == n and len(x.samples) == n for x in segs)
    # the last cut (after the 6th kernel) is at the very end: no empty piece
    for p in range(n):
        v.remap(p)
        g.replay()
    v.synchronize()
    recs = rt.sim.trace()
    assert [rec_id(r) for r in recs] == list(range(6)) * n
    for a, b in zip(recs, recs[1:]):
        assert b.start_us >= a.end_us, "the pieces of a step run one after the other"
    assert g.stats().launches == n
    assert g.segment(1).piece == 1
    rt.close()


def test_automatic_cut_from_the_measuring_step():
    rt = make_rt("manual")
    info = rt.info()
    full = next(p.index for p in info.pctx if p.sm_count == info.sm_count)
    st = Step(rt, nk=12, blocks=info.sm_count, block_us=250.0)
    v = rt.vctx("v", initial_pctx=full)
    g = v.graph_raw(st, segment_us=1000)
    s = g.stats()
    assert (s.segment_us, s.uncut, s.pieces, s.segments, s.cut_points) == (1000, "pending", 1, 1, 11)
    for _ in range(3):
        g.replay()
    v.synchronize()
    s = g.stats()
    assert s.uncut == "none" and s.calibrated_pctx == full
    assert s.segments > 1, "a 12-kernel step of about 3000 us on the whole GPU (the largest pCtx), cut at 1000 us"
    assert s.step_us > 12 * 250.0 * 0.9 and s.longest_segment_us <= 1000
    assert 0 < s.longest_segment_us
    segs = g.segments()
    assert len(segs) == s.segments
    assert sum(x.nodes for x in segs) == 12, "the segments hold every node once"
    assert all(x.piece == 0 and x.calibrated_us > 0 for x in segs)
    assert g.segment(s.segments - 1) == segs[-1]
    with pytest.raises(detshare.InvalidArgumentError):
        g.segment(s.segments)
    with pytest.raises(ValueError, match="index"):
        g.segment(-1)
    # the same kernels in the same order, step after step, on every pCtx
    for p in range(len(info.pctx)):
        v.remap(p)
        g.replay()
    v.synchronize()
    assert [rec_id(r) for r in rt.sim.trace()] == list(range(12)) * (3 + len(info.pctx))
    assert st.calls == len(info.pctx), "captured once per pCtx, never again"
    assert any(sum(x.samples) for x in g.segments()), "segments are timed like kernels"
    g.close()
    with pytest.raises(detshare.InvalidHandleError):
        g.segments()
    rt.close()


def test_a_step_that_cannot_be_cut_says_why(rt):
    v = rt.vctx("v")
    g = v.graph_raw(Step(rt, nk=1), segment_us=100)
    g.replay()
    v.synchronize()
    s = g.stats()
    assert (s.uncut, s.segments) == ("no_cut", 1)
    g2 = v.graph_raw(Step(rt, nk=3, blocks=1, block_us=1.0), segment_us=detshare.GRAPH_SEGMENT_MAX_US)
    g2.replay()
    v.synchronize()
    assert (g2.stats().uncut, g2.stats().segments) == ("fits", 1)


@pytest.mark.parametrize("bad", [1, 99, 10_000_001, -1, 2**32])
def test_bad_segment_us_is_a_value_error(rt, bad):
    v = rt.vctx("v")
    st = Step(rt)
    with pytest.raises(ValueError, match="segment_us"):
        v.graph_raw(st, segment_us=bad)
    with pytest.raises(ValueError, match="segment_us"):
        v.graph_from_cuda_graph(0, segment_us=bad)
    with pytest.raises(ValueError, match="segment_us"):
        v.graph_from_cuda_graphs([0], segment_us=bad)
    assert st.calls == 0 and v.graphs == ()


@pytest.mark.parametrize("bad", [1000.0, "1000", None, True])
def test_segment_us_not_an_int_is_a_type_error(rt, bad):
    v = rt.vctx("v")
    with pytest.raises(TypeError, match="segment_us"):
        v.graph_raw(Step(rt), segment_us=bad)
    with pytest.raises(TypeError, match="segment_us"):
        v.graph(lambda: None, segment_us=bad)  # checked before the device is


def test_segment_us_bounds_are_accepted(rt):
    v = rt.vctx("v")
    for us in (0, detshare.GRAPH_SEGMENT_MIN_US, detshare.GRAPH_SEGMENT_MAX_US):
        with v.graph_raw(Step(rt, nk=2), segment_us=us) as g:
            assert g.stats().segment_us == us


def test_graph_cut_outside_a_capture_is_refused(rt):
    with pytest.raises(detshare.InvalidArgumentError, match="capture"):
        detshare.graph_cut()
    with pytest.raises(detshare.InvalidArgumentError):
        detshare.graph_cut(0x1234)
    # nor on another thread while a capture runs here, nor once it is over
    errs = []

    def elsewhere():
        try:
            detshare.graph_cut()
        except detshare.InvalidArgumentError as e:
            errs.append(e)

    v = rt.vctx("v")

    def cap(stream):
        rt.sim.launch_on_stream(stream, k, 132, 128)
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()

    k = rt.sim.kernel("k", 10.0)
    v.graph_raw(cap)
    assert len(errs) == len(rt.info().pctx)
    with pytest.raises(detshare.InvalidArgumentError):
        detshare.graph_cut()


def test_graph_cut_on_another_stream_fails_the_capture(rt):
    v = rt.vctx("v")
    k = rt.sim.kernel("k", 10.0)

    def cap(stream):
        rt.sim.launch_on_stream(stream, k, 132, 128)
        detshare.graph_cut(stream + 8)

    with pytest.raises(detshare.InvalidArgumentError) as e:
        v.graph_raw(cap)
    assert isinstance(e.value.__cause__, detshare.CaptureError)
    assert v.graphs == ()


def test_graph_from_cuda_graphs_bad_input(rt):
    v = rt.vctx("v")
    with pytest.raises(detshare.InvalidArgumentError):
        v.graph_from_cuda_graphs([])
    with pytest.raises(detshare.InvalidArgumentError):
        v.graph_from_cuda_graphs([0, 0])  # NULL CUgraphs
    with pytest.raises(TypeError, match=r"graphs\[1\]"):
        v.graph_from_cuda_graphs([0, "graph"])
    with pytest.raises(TypeError, match="sequence"):
        v.graph_from_cuda_graphs(0)  # type: ignore[arg-type]

    class NoGraph:  # stands for torch's CUDAGraph, without a graph
        def raw_cuda_graph(self):
            return 0

    with pytest.raises(detshare.InvalidArgumentError):
        v.graph_from_cuda_graphs([NoGraph()])
    assert v.graphs == ()


def test_vctx_stats_have_the_yield_fields(rt):
    s = rt.vctx("v").stats()
    assert (s.yields, s.yield_p50_us, s.yield_p99_us, s.yield_max_us) == (0, 0.0, 0.0, 0.0)
    assert isinstance(s.yields, int) and isinstance(s.yield_max_us, float)

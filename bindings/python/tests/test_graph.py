"""Graphs that follow their vCtx (VCtx.graph_raw / graph / graph_from_cuda_graph,
ds_graph_*): one instantiation per pCtx, each replay on the SMs of the pCtx the
vCtx is bound to, the capture function's exceptions re-raised, bad handles
refused with the library's statuses. Simulated device; the PyTorch test at the
end needs torch and a CUDA GPU and is skipped otherwise."""

from __future__ import annotations

import ctypes
import gc
import random

import pytest

import detshare
from detshare import _types as T
from detshare import errors
from detshare._lib import lib

from conftest import make_rt


class Boom(Exception):
    pass


class Step:
    """A capture function: `nk` kernels of `blocks` blocks on the stream it is
    handed, each with an int parameter id*10+i (seen in the trace). Counts its
    calls; `raise_at` / `fail_at` (1-based call numbers) raise Boom or return 7."""

    def __init__(self, rt, nk=2, blocks=8 * 132, ident=1, block_us=(20.0, 5.0)):
        self.rt = rt
        self.k = [rt.sim.kernel(f"g{i}", block_us[i % len(block_us)], param_sizes=[4]) for i in range(nk)]
        self.blocks = blocks
        self.ident = ident
        self.calls = 0
        self.streams = []
        self.raise_at = 0
        self.fail_at = 0

    def __call__(self, stream):
        self.calls += 1
        self.streams.append(stream)
        if self.calls == self.raise_at:
            raise Boom(f"call {self.calls}")
        if self.calls == self.fail_at:
            return 7
        for i, k in enumerate(self.k):
            self.rt.sim.launch_on_stream(stream, k, self.blocks, 128, [ctypes.c_int(self.ident * 10 + i)])
        return None

    def ids(self):
        return [self.ident * 10 + i for i in range(len(self.k))]


def test_structs_start_as_the_init_macros():
    a = T.ds_graph_attr()  # DS_GRAPH_ATTR_INIT: header filled, lazy, whole pool
    assert (a.size, a.magic, a.version, a.flags, a.num_pctxs) == (48, T.DS_ABI_MAGIC, T.DS_ABI_VERSION, 0, 0)
    assert not a.name and not a.pctxs
    s = T.ds_graph_stats()  # DS_GRAPH_STATS_INIT
    assert (s.size, s.magic, s.version) == (1608, T.DS_ABI_MAGIC, T.DS_ABI_VERSION)
    assert errors.ERROR_CLASSES[19] is detshare.CaptureError


def rec_id(r):
    return int.from_bytes(r.params[:4], "little", signed=True)


def test_create_replay_stats_destroy(rt):
    info = rt.info()
    n = len(info.pctx)
    st = Step(rt)
    v = rt.vctx("v")
    g = v.graph_raw(st, name="step")
    assert isinstance(g, detshare.Graph) and g.name == "step" and not g.closed
    assert v.graphs == (g,)
    assert g.outputs is None
    # eager: one capture per pCtx now, each on its own stream, and nothing ran
    assert st.calls == n and all(st.streams) and len(set(st.streams)) >= 1
    assert rt.sim.trace() == []
    s = g.stats()
    assert isinstance(s, detshare.GraphStats)
    assert s.launches == 0 and len(s.pctx) == n
    assert s.instantiated == tuple(range(n))
    for i, p in enumerate(s.pctx):
        assert isinstance(p, detshare.GraphPCtxStats)
        assert (p.pctx, p.instantiated, p.nodes, p.kernel_nodes, p.launches) == (i, True, 2, 2, 0)
        assert p.capture_us > 0 and p.instantiate_us >= 0

    for _ in range(5):
        assert g.replay() is None
    v.synchronize()
    recs = rt.sim.trace()
    assert [rec_id(r) for r in recs] == st.ids() * 5
    assert all(r.grid == (st.blocks, 1, 1) and r.block == (128, 1, 1) for r in recs)
    assert st.calls == n, "an eager graph never captures again"
    s = g.stats()
    assert s.launches == 5 and s.pctx[v.pctx].launches == 5
    assert sum(p.launches for p in s.pctx) == 5
    assert v.stats().launches == 0, "graph launches are not ds_launch kernels"

    h = g.handle
    g.close()
    assert g.closed and v.graphs == ()
    g.close()  # idempotent
    with pytest.raises(detshare.InvalidHandleError):
        g.replay()
    with pytest.raises(detshare.InvalidHandleError):
        g.stats()
    # the library itself refuses the stale handle
    with pytest.raises(detshare.InvalidHandleError) as e:
        errors.check(lib().ds_graph_launch(v.handle, h), "ds_graph_launch")
    assert e.value.status == 2 and "destroyed" in e.value.message
    v.launch(st.k[0], 1, 32, [ctypes.c_int(0)])  # the vCtx goes on
    v.synchronize()


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "lazy"])
def test_graph_follows_remaps(eager):
    rt = make_rt("manual")
    info = rt.info()
    n = len(info.pctx)
    sms = [rt.probe_sms(p.index) for p in info.pctx]
    rt.sim.trace_clear()
    st = Step(rt)
    v = rt.vctx("v", cls="ls")
    g = v.graph_raw(st, eager=eager)
    assert st.calls == (n if eager else 0)
    assert g.stats().instantiated == (tuple(range(n)) if eager else ())
    order = list(range(n)) * 2
    random.Random(3).shuffle(order)
    seen = set()
    for p in order:
        v.remap(p)
        g.replay()
        v.synchronize()
        assert v.pctx == p
        seen.add(p)
        if not eager:  # captured at the first replay on each pCtx, never again
            assert st.calls == len(seen)
            assert g.stats().instantiated == tuple(sorted(seen))
        recs = rt.sim.trace()[-2:]
        assert [rec_id(r) for r in recs] == st.ids()
        for r in recs:
            assert r.sms <= sms[p], f"pCtx {p}: ran on SMs outside it"
            assert len(r.sms) == len(sms[p]), f"pCtx {p}: {len(r.sms)} of its {len(sms[p])} SMs"
    s = g.stats()
    assert s.launches == len(order)
    assert [q.launches for q in s.pctx] == [order.count(p) for p in range(n)]
    assert v.stats().remaps > 0
    rt.close()
    assert g.closed, "closing the runtime destroys the graph"


def test_program_order_with_kernels_across_remaps():
    rt = make_rt("manual")
    n = len(rt.info().pctx)
    st = Step(rt, nk=1, block_us=(30.0,))
    k = rt.sim.kernel("k", 10.0, param_sizes=[4])
    v = rt.vctx("v")
    g = v.graph_raw(st)
    want = []
    rng = random.Random(5)
    for i in range(40):
        v.remap(rng.randrange(n))
        if rng.randrange(2):
            g.replay()
            want.append(st.ids()[0])
        else:
            v.launch(k, 264, 128, [ctypes.c_int(1000 + i)])
            want.append(1000 + i)
    v.synchronize()
    recs = rt.sim.trace()
    assert [rec_id(r) for r in recs] == want
    for a, b in zip(recs, recs[1:]):
        assert b.start_us >= a.end_us, "a vCtx's work runs one after the other, graphs included"
    rt.close()


def test_exception_in_the_capture_function_is_reraised_and_nothing_leaks(rt):
    n = len(rt.info().pctx)
    st = Step(rt)
    st.raise_at = 3
    v = rt.vctx("v")
    with pytest.raises(Boom, match="call 3") as e:
        v.graph_raw(st, name="bad")
    cause = e.value.__cause__
    assert isinstance(cause, detshare.CaptureError) and cause.status == 19
    assert cause.status_name == "DS_ERR_CAPTURE" and "bad" in str(cause)
    assert st.calls == 3, "the library stops at the failing capture"
    assert v.graphs == ()
    assert rt.sim.trace() == [], "nothing of the failed captures ran"
    # the vCtx still works: kernels, sections, and a graph made afterwards
    v.launch(st.k[0], 8, 32, [ctypes.c_int(5)])
    with v.section() as s:
        rt.sim.launch_on_stream(s, st.k[1], 8, 32, [ctypes.c_int(6)])
    ok = Step(rt, ident=4)
    g = v.graph_raw(ok)
    g.replay()
    v.synchronize()
    assert [rec_id(r) for r in rt.sim.trace()] == [5, 6] + ok.ids()
    assert ok.calls == n and v.graphs == (g,)
    assert g._error is None


def test_base_exceptions_do_not_cross_into_c(rt):
    class Stop(BaseException):
        pass

    v = rt.vctx("v")

    def capture(stream):
        raise Stop()

    with pytest.raises(Stop) as e:
        v.graph_raw(capture)
    assert isinstance(e.value.__cause__, detshare.CaptureError)
    assert v.graphs == ()


def test_nonzero_return_and_empty_capture_are_capture_errors(rt):
    st = Step(rt)
    st.fail_at = 2
    v = rt.vctx("v")
    with pytest.raises(detshare.CaptureError) as e:
        v.graph_raw(st, name="rc")
    assert e.value.__cause__ is None and "returned 7" in e.value.message
    with pytest.raises(detshare.CaptureError, match="no work"):
        v.graph_raw(lambda s: None)
    # a capture function whose work differs from pCtx to pCtx is refused
    grids = iter(range(1, 100))
    k = rt.sim.kernel("k", 1.0)
    with pytest.raises(detshare.CaptureError, match="differs"):
        v.graph_raw(lambda s: rt.sim.launch_on_stream(s, k, next(grids), 32))
    assert v.graphs == ()


def test_lazy_capture_error_surfaces_in_replay_and_is_retried():
    rt = make_rt("manual")
    st = Step(rt)
    v = rt.vctx("v", initial_pctx=0)
    g = v.graph_raw(st, eager=False, name="lazy")
    assert st.calls == 0
    g.replay()  # captures pCtx 0
    v.synchronize()
    st.raise_at = 2
    v.remap(1)
    before = len(rt.sim.trace())
    with pytest.raises(Boom, match="call 2") as e:
        g.replay()
    assert isinstance(e.value.__cause__, detshare.CaptureError)
    v.synchronize()
    assert len(rt.sim.trace()) == before, "nothing launched"
    s = g.stats()
    assert s.launches == 1 and s.instantiated == (0,)
    assert not g.closed and v.graphs == (g,)
    g.replay()  # the next replay there tries again
    v.synchronize()
    assert st.calls == 3 and g.stats().instantiated == (0, 1)
    assert [rec_id(r) for r in rt.sim.trace()[-2:]] == st.ids()
    rt.close()


def test_the_trampoline_lives_as_long_as_the_graph():
    rt = make_rt("manual")
    n = len(rt.info().pctx)
    v = rt.vctx("v")
    k = rt.sim.kernel("k", 1.0)
    g = v.graph_raw(lambda s: rt.sim.launch_on_stream(s, k, 16, 32), eager=False)
    gc.collect()  # the lambda and the ctypes callback are only referenced by the graph
    for p in range(n):
        v.remap(p)
        g.replay()
    v.synchronize()
    assert g.stats().instantiated == tuple(range(n))
    rt.close()


def test_graph_of_another_vctx_or_runtime_is_refused(rt):
    a = rt.vctx("a")
    b = rt.vctx("b")
    g = a.graph_raw(Step(rt))
    with pytest.raises(detshare.InvalidArgumentError) as e:
        b.launch_graph(g)
    assert e.value.status == 1
    with make_rt() as other:
        c = other.vctx("c")
        with pytest.raises(detshare.InvalidArgumentError):
            c.launch_graph(g)
    a.launch_graph(g)  # its own vCtx: the same as g.replay()
    a.synchronize()
    assert g.stats().launches == 1


def test_pctx_sets(rt):
    n = len(rt.info().pctx)
    v = rt.vctx("v", initial_pctx=0)
    st = Step(rt)
    g = v.graph_raw(st, pctxs=[1, 2])
    assert st.calls == 2 and g.stats().instantiated == (1, 2)
    before = len(rt.sim.trace())
    with pytest.raises(detshare.NotFoundError) as e:  # bound to pCtx 0, outside the set
        g.replay()
    assert e.value.status == 13 and isinstance(e.value, LookupError)
    v.synchronize()
    assert len(rt.sim.trace()) == before and g.stats().launches == 0
    v.remap(2)
    g.replay()
    v.synchronize()
    assert g.stats().pctx[2].launches == 1
    for bad in ([n], [1, 1], []):
        with pytest.raises(detshare.InvalidArgumentError):
            v.graph_raw(Step(rt), pctxs=bad)
    with pytest.raises(ValueError):
        v.graph_raw(Step(rt), pctxs=[-1])
    assert v.graphs == (g,)


def test_graph_inside_an_open_section(rt):
    """A graph made and replayed while a section is open goes to the section's
    stream, in program order, like a launch there (detshare.h)."""
    v = rt.vctx("v")
    st = Step(rt)
    k = rt.sim.kernel("before", 50.0, param_sizes=[4])
    with v.section() as s:
        rt.sim.launch_on_stream(s, k, 132, 128, [ctypes.c_int(0)])
        g = v.graph_raw(st)
        assert st.calls >= 1, "eager by default: captured now"
        g.replay()
    v.synchronize()
    assert g.stats().launches == 1
    names = [r.name for r in rt.sim.trace()]
    assert names == ["before", "g0", "g1"], names


def test_destroy_while_in_flight(rt):
    v = rt.vctx("v")
    st = Step(rt, block_us=(500.0,), nk=1)
    g = v.graph_raw(st)
    g.replay()
    with pytest.raises(detshare.BusyError):  # virtual time: the graph is still running
        g.close(synchronize=False)
    assert not g.closed and v.graphs == (g,)
    t0 = rt.sim.now_us()
    g.close()  # waits for the vCtx first
    assert g.closed and rt.sim.now_us() >= t0 + 500.0


def test_vctx_close_and_context_managers(rt):
    v = rt.vctx("v")
    g1 = v.graph_raw(Step(rt))
    with v.graph_raw(Step(rt, ident=2)) as g2:
        g2.replay()
    assert g2.closed and v.graphs == (g1,)
    g1.replay()
    v.close()  # waits for the work, destroys g1 with it
    assert g1.closed
    g1.close()  # nothing left to do
    with pytest.raises(detshare.InvalidHandleError):
        g1.replay()
    assert "destroyed" in repr(g1)


def test_bad_arguments(rt):
    v = rt.vctx("v")
    with pytest.raises(TypeError):
        v.graph_raw(42)  # type: ignore[arg-type]
    with pytest.raises(detshare.InvalidArgumentError):
        v.graph_from_cuda_graph(0)  # a NULL CUgraph
    with pytest.raises(TypeError, match="CUDAGraph"):
        v.graph_from_cuda_graph("graph")

    class NoGraph:  # an object that stands for torch's CUDAGraph, without a graph
        def raw_cuda_graph(self):
            return 0

    with pytest.raises(detshare.InvalidArgumentError):
        v.graph_from_cuda_graph(NoGraph())
    with pytest.raises(ValueError, match="CUDA device"):  # torch work needs the GPU
        v.graph(lambda: None)
    with pytest.raises(ValueError, match="warmup"):
        v.graph(lambda: None, warmup=-1)
    assert v.graphs == ()


# ---- PyTorch on a GPU ---------------------------------------------------------------


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    try:
        rt = detshare.Runtime("cuda", policy="manual")
    except detshare.DetShareError as e:
        pytest.skip(f"no detshare runtime on the GPU: {e}")
    return torch, rt


def test_torch_graph_follows_the_vctx_bitwise():
    torch, rt = _torch_cuda()
    with rt:
        info = rt.info()
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16, generator=gen)

        def step():
            h = torch.relu(x @ w)
            return torch.softmax(h.float(), -1), h.sum(0)

        want = [t.clone() for t in step()]
        torch.cuda.synchronize()
        v = rt.vctx("v")
        g = v.graph(step, name="mlp")
        outs = g.outputs
        assert isinstance(outs, tuple) and len(outs) == 2
        s = g.stats()
        assert s.instantiated == tuple(range(len(info.pctx)))
        assert all(p.kernel_nodes > 0 and p.nodes == s.pctx[0].nodes for p in s.pctx)
        for p in range(len(info.pctx)):
            for o in outs:
                o.zero_()
            torch.cuda.synchronize()
            v.remap(p)
            assert g.replay() is outs
            v.synchronize()
            assert v.pctx == p
            for got, ref in zip(outs, want):
                assert torch.equal(got.view(torch.int16 if got.dtype == torch.bfloat16 else torch.int32),
                                   ref.view(torch.int16 if ref.dtype == torch.bfloat16 else torch.int32)), p
        # fn raising inside the capture: its exception, and torch and the vCtx go on
        with pytest.raises(Boom) as e:
            v.graph(lambda: (_ for _ in ()).throw(Boom("in capture")), warmup=0)
        assert isinstance(e.value.__cause__, detshare.CaptureError)
        g.replay()
        v.synchronize()
        assert torch.equal(outs[0], want[0])
        g.close()
        assert g.closed


def test_torch_lazy_graph_captures_at_replay_and_reraises():
    torch, rt = _torch_cuda()
    with rt:
        n = len(rt.info().pctx)
        x = torch.randn(32, 256, device="cuda")
        w = torch.randn(256, 256, device="cuda")
        fail = []

        def step():
            if fail:
                raise Boom("lazy")
            return torch.tanh(x @ w)

        want = step().clone()
        torch.cuda.synchronize()
        v = rt.vctx("v", initial_pctx=n - 1)
        g = v.graph(step, eager=False)
        assert g.outputs is None and g.stats().instantiated == ()
        out = g.replay()  # captures pCtx n-1 now
        v.synchronize()
        assert out is g.outputs and torch.equal(out, want)
        assert g.stats().instantiated == (n - 1,)
        fail.append(1)
        v.remap(1)
        with pytest.raises(Boom) as e:
            g.replay()
        assert isinstance(e.value.__cause__, detshare.CaptureError)
        assert g.stats().instantiated == (n - 1,) and g.stats().launches == 1
        fail.clear()
        out.zero_()
        torch.cuda.synchronize()
        assert g.replay() is out, "later captures write the same static outputs"
        v.synchronize()
        assert torch.equal(out, want) and g.stats().instantiated == (1, n - 1)
        assert v.stats().graph_launches == 2


def test_torch_cuda_graph_rebound_to_every_pctx():
    torch, rt = _torch_cuda()
    with rt:
        info = rt.info()
        x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
        want = torch.softmax((x @ w).float(), -1)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                torch.softmax((x @ w).float(), -1)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        # earlier tests' garbage goes now, not during the capture below (torch
        # 2.11's torch.cuda.graph no longer collects before capturing)
        gc.collect()
        tg = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(tg):
            y = torch.softmax((x @ w).float(), -1)
        v = rt.vctx("v")
        g = v.graph_from_cuda_graph(tg, outputs=y, name="rebound")
        del tg
        gc.collect()  # the Graph keeps torch's graph, and so its memory pool, alive
        s = g.stats()
        assert s.instantiated == tuple(range(len(info.pctx)))
        assert all(p.kernel_nodes > 0 and p.capture_us == 0 for p in s.pctx)
        for p in range(len(info.pctx)):
            y.zero_()
            torch.cuda.synchronize()
            v.remap(p)
            assert g.replay() is y
            v.synchronize()
            assert torch.equal(y.view(torch.int32), want.view(torch.int32)), p
        g.close()

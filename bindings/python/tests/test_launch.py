"""Launches from Python reach the (simulated) driver exactly as given:
function, grid, block, shared memory and every parameter byte, under remaps."""

from __future__ import annotations

import ctypes
import random

import pytest

import detshare

from conftest import make_rt


class Blob(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_float), ("tag", ctypes.c_char * 20)]


def test_params_reach_the_driver_byte_for_byte(rt):
    params = [
        ctypes.c_uint64(0x1122334455667788),
        ctypes.c_int32(-5),
        Blob(7, 2.5, b"tag"),
        ctypes.c_int16(-2),
        ctypes.c_double(3.141592653589793),
        ctypes.c_void_p(0xDEADBEEF000),
        (ctypes.c_uint8 * 3)(1, 2, 3),
        ctypes.c_float(-0.0),
    ]
    sizes = [ctypes.sizeof(p) for p in params]
    k = rt.sim.kernel("echo", 3.0, param_sizes=sizes)
    v = rt.vctx("v")
    v.launch(k, (3, 2, 1), (64, 2), params, shared_mem_bytes=2048)
    v.synchronize()
    (rec,) = rt.sim.trace()
    assert rec.function == k.handle and rec.name == "echo"
    assert rec.grid == (3, 2, 1) and rec.block == (64, 2, 1)
    assert rec.shared_mem_bytes == 2048
    assert rec.params == b"".join(bytes(p) for p in params)


def test_random_launches_under_remaps_are_unchanged():
    rt = make_rt("manual")
    rng = random.Random(7)
    info = rt.info()
    sizes = [8, 4, ctypes.sizeof(Blob), 2]
    k = rt.sim.kernel("echo", 3.0, param_sizes=sizes)
    v = rt.vctx("v", cls="ls")
    want = []
    for i in range(300):
        if rng.randrange(3) == 0:
            v.remap(rng.randrange(len(info.pctx)))
        a = ctypes.c_uint64(rng.getrandbits(64))
        b = ctypes.c_int32(rng.randrange(-500, 500))
        c = Blob(rng.randrange(100), rng.randrange(1000) / 7.0, b"t%d" % rng.randrange(1000))
        d = ctypes.c_int16(rng.randrange(30000))
        g = (1 + rng.randrange(300), 1 + rng.randrange(3), 1 + rng.randrange(2))
        blk = (1 + rng.randrange(256), 1 + rng.randrange(4), 1)
        smem = rng.randrange(4) * 1024
        v.launch(k, g, blk, [a, b, c, d], shared_mem_bytes=smem,
                 expected_us=rng.randrange(2) * 5, phase=rng.choice([None, "decode", "prefill"]))
        want.append((g, blk, smem, bytes(a) + bytes(b) + bytes(c) + bytes(d), v.pctx))
    v.synchronize()
    recs = rt.sim.trace()
    assert len(recs) == len(want), "one driver launch per launch: no slicing, no extra kernels"
    assert v.stats().remaps > 30
    for r, (g, blk, smem, raw, pctx) in zip(recs, want):
        assert (r.function, r.grid, r.block, r.shared_mem_bytes, r.params) == (k.handle, g, blk, smem, raw)
        assert len(r.sms) <= info.pctx[pctx].sm_count
    rt.close()


def test_function_handle_forms(rt):
    k = rt.sim.kernel("k", 1.0)
    v = rt.vctx("v")
    v.launch(k, 1, 32)  # SimKernel
    v.launch(k.handle, 1, 32)  # int, as from CuPy's RawKernel.kernel.ptr
    v.launch(int(k), [1], [32, 1, 1], [])
    v.synchronize()
    assert [r.function for r in rt.sim.trace()] == [k.handle] * 3


def test_bad_params_and_dims(rt):
    k = rt.sim.kernel("k", 1.0, param_sizes=[4])
    v = rt.vctx("v")
    with pytest.raises(TypeError, match="ctypes"):
        v.launch(k, 1, 32, [3])
    with pytest.raises(ValueError, match="grid"):
        v.launch(k, (1, 1, 1, 1), 32, [ctypes.c_int(3)])
    with pytest.raises(detshare.InvalidArgumentError):
        v.launch(0, 1, 32)  # NULL function
    assert v.stats().launches == 0


def test_sim_launch_on_stream_params(rt):
    k = rt.sim.kernel("lib", 1.0, param_sizes=[8, 4])
    v = rt.vctx("v")
    with v.section() as s:
        rt.sim.launch_on_stream(s, k, 2, 64, [ctypes.c_uint64(42), ctypes.c_float(1.5)])
    v.synchronize()
    (rec,) = rt.sim.trace()
    assert rec.params == bytes(ctypes.c_uint64(42)) + bytes(ctypes.c_float(1.5))
    assert rec.stream == s


def test_trace_clear_and_time(rt):
    k = rt.sim.kernel("k", 100.0)
    v = rt.vctx("v")
    v.launch(k, 132, 32)
    v.synchronize()
    assert rt.sim.now_us() == pytest.approx(100.0)
    rt.sim.sleep_until(250.0)
    assert rt.sim.now_us() == pytest.approx(250.0)
    first = rt.sim.trace()[0].seq
    rt.sim.trace_clear()
    assert rt.sim.trace() == []
    v.launch(k, 1, 32)
    v.synchronize()
    assert rt.sim.trace()[0].seq == first + 1


def test_trace_larger_than_one_read(rt):
    k = rt.sim.kernel("k", 1.0)
    v = rt.vctx("v")
    for _ in range(300):
        v.launch(k, 1, 32)
    v.synchronize()
    recs = rt.sim.trace()
    assert [r.seq for r in recs] == list(range(300))

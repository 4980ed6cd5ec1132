"""vCtx groups: the ranks of one job on several GPUs, one vCtx per rank on
each device's runtime, placed as one (rank 0's policy decides, every rank
runs its k-th unit on the tier of rank 0's k-th unit). Two simulated devices
in one process, and a group shared by two processes."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

import detshare
from detshare import _types as T

from conftest import REPO_ROOT, make_rt

# The two devices list the same tiers in opposite orders, so a rank > 0 that
# took rank 0's pool index rather than its tier would run on other SMs.
TIERS = [(0, "full"), (16, "low"), (32, "low"), (100, "high"), (116, "high")]
TIERS_REVERSED = list(reversed(TIERS))


def _pair_rts(**kw: object):
    kw.setdefault("policy", "manual")
    return make_rt(tiers=TIERS, **kw), make_rt(tiers=TIERS_REVERSED, **kw)


def _sms(rt: detshare.Runtime) -> dict:
    return {p.index: p.sm_count for p in rt.info().pctx}


def _pctx_of(rt: detshare.Runtime, sm_count: int) -> int:
    return next(p.index for p in rt.info().pctx if p.sm_count == sm_count)


def test_every_unit_of_rank_1_runs_on_rank_0s_tier():
    rt0, rt1 = _pair_rts()
    with rt0, rt1:
        v0 = rt0.vctx("tp0", group="py-tiers", rank=0, ranks=2)
        v1 = rt1.vctx("tp1", group="py-tiers", rank=1, ranks=2)
        assert (v0.group, v0.rank, v0.ranks, v0.shared) == ("py-tiers", 0, 2, False)
        assert (v1.group, v1.rank, v1.ranks, v1.shared) == ("py-tiers", 1, 2, False)
        k0, k1 = rt0.sim.kernel("step", 5.0), rt1.sim.kernel("step", 5.0)
        sms0, sms1 = _sms(rt0), _sms(rt1)
        # rank 0 to a small tier first, then through every tier; rank 1 asks
        # for another tier each time, which its group ignores
        plan = [16, 16, 32, 132, 100, 116, 16, 100, 32, 116, 132, 16]
        other = {16: 116, 32: 132, 100: 16, 116: 32, 132: 100}
        n = len(plan)
        followed = []
        for k, want in enumerate(plan):
            v0.remap(_pctx_of(rt0, want))
            v1.remap(_pctx_of(rt1, other[want]))
            v0.launch(k0, 4, 128)
            assert sms0[v0.pctx] == want, f"unit {k}: the manual policy did not move rank 0"
            v1.launch(k1, 4, 128)
            followed.append((sms1[v1.pctx], v1.pctx))
            assert sms1[v1.pctx] == sms0[v0.pctx], (
                f"unit {k}: rank 1 on {sms1[v1.pctx]} SMs (pCtx {v1.pctx}), rank 0 on {sms0[v0.pctx]}")
        # the pool indices differ where the SM counts agree: the tier was
        # mapped, not the index copied
        assert any(i != _pctx_of(rt0, s) for s, i in followed)
        v0.synchronize()
        v1.synchronize()
        s0, s1 = v0.stats(), v1.stats()
        assert (s0.group_units, s1.group_units) == (n, n)
        assert s0.launches == s1.launches == n
        assert isinstance(s1.group_wait_us, float) and s1.group_wait_us >= 0.0
        # outside a group: no group figures
        solo = rt0.vctx("solo")
        solo.launch(k0, 4, 128)
        assert (solo.group, solo.rank, solo.ranks, solo.shared) == (None, 0, 0, False)
        assert (solo.stats().group_units, solo.stats().group_wait_us) == (0, 0.0)


def test_a_closed_rank_0_fails_rank_1_at_once_naming_the_group():
    # a teardown timeout far above what the check allows: a PeerLostError
    # that came from waiting would be too late
    rt0, rt1 = _pair_rts(teardown_timeout_ms=20_000)
    with rt0, rt1:
        v0 = rt0.vctx(group="py-departed", rank=0, ranks=2)
        v1 = rt1.vctx(group="py-departed", rank=1, ranks=2)
        k0, k1 = rt0.sim.kernel("step", 5.0), rt1.sim.kernel("step", 5.0)
        for _ in range(5):
            v0.launch(k0, 4, 128)
            v1.launch(k1, 4, 128)
        v0.close()
        t0 = time.monotonic()
        with pytest.raises(detshare.PeerLostError) as e:
            v1.launch(k1, 4, 128)
        assert time.monotonic() - t0 < 5.0
        assert "'py-departed'" in str(e.value) and "rank 0 left after deciding 5 units" in str(e.value)
        assert (e.value.status, e.value.status_name) == (20, "DS_ERR_PEER_LOST")
        assert v1.stats().group_units == 5
        v1.close()


def test_a_stalled_rank_0_times_rank_1_out_naming_it():
    rt0, rt1 = _pair_rts(teardown_timeout_ms=300)
    with rt0, rt1:
        v0 = rt0.vctx(group="py-stalled", rank=0, ranks=2)
        v1 = rt1.vctx(group="py-stalled", rank=1, ranks=2)
        k0, k1 = rt0.sim.kernel("step", 5.0), rt1.sim.kernel("step", 5.0)
        v0.launch(k0, 4, 128)
        v1.launch(k1, 4, 128)
        t0 = time.monotonic()
        with pytest.raises(detshare.TimeoutError) as e:
            v1.launch(k1, 4, 128)  # rank 0 has not decided unit 1
        waited = time.monotonic() - t0
        assert isinstance(e.value, TimeoutError)  # builtins too
        assert "'py-stalled'" in str(e.value) and "rank 0 has not decided unit 1" in str(e.value)
        assert 0.25 <= waited < 10.0
        v1.close()
        v0.close()


def test_bad_group_arguments_create_nothing():
    # max_vctx=1: the vCtx created at the end proves no refused one is alive
    # in the library
    with make_rt("manual", max_vctx=1) as rt:
        # the binding's checks name the argument and its range; the library's
        # (the name's characters, rank < ranks, ranks <= 64) name the field
        bad = [
            (dict(group=5, ranks=2), TypeError, "group must be a str, not int"),
            (dict(group=b"g", ranks=2), TypeError, "group must be a str, not bytes"),
            (dict(group="g"), detshare.InvalidArgumentError, "ranks must be 2..64 with group 'g', not 0"),
            (dict(group="g", ranks=1), detshare.InvalidArgumentError, "ranks must be 2..64 with group 'g', not 1"),
            (dict(group="g", ranks=2, rank=2), detshare.InvalidArgumentError, "group_rank 2, expected 0 to 1"),
            (dict(group="g", ranks=2, rank=-1), detshare.InvalidArgumentError,
             r"rank must be in 0\.\.4294967295, not -1"),
            (dict(group="g", ranks=2, rank=2**32), detshare.InvalidArgumentError,
             r"rank must be in 0\.\.4294967295, not 4294967296"),
            (dict(group="g", ranks=2**32), detshare.InvalidArgumentError, r"ranks must be in 0\.\.4294967295"),
            (dict(group="g", ranks=65), detshare.InvalidArgumentError, "group_ranks 65, expected 2 to 64"),
            (dict(group="g", ranks=2, rank=True), TypeError, "rank must be an int, not bool"),
            (dict(group="g", ranks=True), TypeError, "ranks must be an int, not bool"),
            (dict(group="g", ranks=2, rank=1.0), TypeError, "rank must be an int, not float"),
            (dict(group="g", ranks=2, shared=1), TypeError, "shared must be a bool, not int"),
            (dict(group="has space", ranks=2), detshare.InvalidArgumentError, "group 'has space': 1 to 47 characters"),
            (dict(group="x" * 48, ranks=2), detshare.InvalidArgumentError, "1 to 47 characters"),
            (dict(group="", ranks=2), detshare.InvalidArgumentError, "group '': 1 to 47 characters"),
            (dict(rank=1), detshare.InvalidArgumentError, "rank 1 of 0 ranks given without a group"),
            (dict(ranks=2), detshare.InvalidArgumentError, "rank 0 of 2 ranks given without a group"),
        ]
        for kw, exc, text in bad:
            with pytest.raises(exc, match=text):
                rt.vctx("v", **kw)
            assert rt.vctxs == (), kw
        # generic single-rank code: no group, rank 0 of 1
        v = rt.vctx("v", rank=0, ranks=1, shared=True)
        assert (v.group, v.rank, v.ranks, v.shared) == (None, 0, 0, False)
        v.close()
        # the longest name, and a rank joined twice
        name = "x" * detshare.runtime.VCTX_GROUP_NAME_MAX
        v = rt.vctx("v", group=name, ranks=2)
        assert v.group == name
        v.close()
    rt0, rt1 = _pair_rts()
    with rt0, rt1:
        v0 = rt0.vctx(group="py-twice", rank=0, ranks=2)
        with pytest.raises(detshare.AlreadyExistsError, match="rank 0 has joined already"):
            rt1.vctx(group="py-twice", rank=0, ranks=2)
        with pytest.raises(detshare.InvalidArgumentError, match="has 2 ranks"):
            rt1.vctx(group="py-twice", rank=1, ranks=3)
        assert rt1.vctxs == ()
        v1 = rt1.vctx(group="py-twice", rank=1, ranks=2)
        v0.close()
        v1.close()


def test_the_constants_match_the_header():
    text = (REPO_ROOT / "include" / "detshare" / "detshare.h").read_text()
    for name, value in [("DS_VCTX_GROUP_NAME_MAX", T.DS_VCTX_GROUP_NAME_MAX),
                        ("DS_VCTX_GROUP_MAX_RANKS", T.DS_VCTX_GROUP_MAX_RANKS),
                        ("DS_VCTX_GROUP_SHARED", T.DS_VCTX_GROUP_SHARED)]:
        m = re.search(rf"^#define {name} (\d+)u?\s*$", text, re.M)
        assert m and int(m.group(1)) == value, name
    assert detshare.runtime.VCTX_GROUP_NAME_MAX == 47 and detshare.runtime.VCTX_GROUP_MAX_RANKS == 64


# ---------------------------------------------------------------------------
# across processes


def _shared_rank(name: str, rank: int, plan, fd: int) -> None:
    """Rank `rank` of the shared group `name` on a simulated device of its own
    (rank 1's lists its tiers reversed): rank 0 moves to each tier of `plan`
    before its unit, rank 1 asks for another one (ignored); each unit's SM
    count is written to `fd`, one line per unit."""
    rt = make_rt("manual", tiers=TIERS if rank == 0 else TIERS_REVERSED, teardown_timeout_ms=10_000)
    with rt:
        v = rt.vctx(f"rank{rank}", group=name, rank=rank, ranks=2, shared=True)
        k = rt.sim.kernel("step", 5.0)
        sms = _sms(rt)
        out = []
        for want in plan:
            v.remap(_pctx_of(rt, want if rank == 0 else {16: 116, 32: 132, 100: 16, 116: 32, 132: 100}[want]))
            v.launch(k, 4, 128)
            out.append(str(sms[v.pctx]))
        v.synchronize()
        units = v.stats().group_units
        v.close()
    os.write(fd, ("\n".join(out) + f"\nunits {units}\n").encode())


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks).decode()
        chunks.append(b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (a POSIX system)")
def test_a_shared_group_spans_two_processes():
    name = f"py-xproc-{os.getpid()}"
    plan = [16, 32, 132, 16, 100, 116, 16, 16, 32, 100, 132, 116] * 3
    r_child, w_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # rank 1; never returns into pytest
        rc = 1
        try:
            os.close(r_child)
            _shared_rank(name, 1, plan, w_child)
            rc = 0
        except BaseException as e:  # noqa: BLE001  (reported through the pipe)
            try:
                os.write(w_child, f"error {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(rc)
    os.close(w_child)
    r_mine, w_mine = os.pipe()
    try:
        _shared_rank(name, 0, plan, w_mine)
    finally:
        os.close(w_mine)
        child_out = _read_all(r_child)
        os.close(r_child)
        _, status = os.waitpid(pid, 0)
    mine = _read_all(r_mine).split("\n")
    os.close(r_mine)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"rank 1's process: {child_out}"
    theirs = child_out.split("\n")
    n = len(plan)
    assert mine[:n] == [str(s) for s in plan], "the manual policy did not move rank 0"
    assert theirs[:n] == mine[:n], "rank 1's tiers (SMs per unit) differ from rank 0's"
    assert mine[n] == theirs[n] == f"units {n}"
    assert not Path(f"/dev/shm/detshare.vgroup.{name}").exists(), "the group's shared memory is left behind"

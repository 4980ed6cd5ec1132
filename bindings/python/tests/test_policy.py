"""Policy selection and switching, and that the selection changes where work
runs on the simulated device."""

from __future__ import annotations

import ctypes

import pytest

import detshare

from conftest import make_rt


def test_default_and_builtins():
    with make_rt() as rt:
        assert rt.policy == detshare.DEFAULT_POLICY == "slo_aware"
        assert rt.get_policy() == "slo_aware"
        assert set(rt.policies) >= set(detshare.BUILTIN_POLICIES)
        for name in detshare.BUILTIN_POLICIES:
            rt.set_policy(name)
            assert rt.policy == name
        rt.policy = "shared"
        assert rt.get_policy() == "shared"


@pytest.mark.parametrize("name", detshare.BUILTIN_POLICIES)
def test_create_with_each_builtin(name):
    with make_rt(name) as rt:
        assert rt.policy == name


def test_builtins_match_the_header():
    from conftest import REPO_ROOT

    text = (REPO_ROOT / "include" / "detshare" / "policy.h").read_text()
    for name in detshare.BUILTIN_POLICIES:
        assert f'"{name}"' in text, name


def _ls_wait(policy: str):
    """BE: 16 waves of 1 ms blocks over the whole GPU; LS: one 10 us block
    100 us later. Returns (LS wait, BE end, SMs LS ran on, SMs BE ran on)."""
    with make_rt(policy) as rt:
        bek = rt.sim.kernel("be", 1000.0)
        lsk = rt.sim.kernel("ls", 10.0)
        be = rt.vctx("be", cls="be")
        ls = rt.vctx("ls", cls="ls")
        be.launch(bek, 16 * 132, 256)
        rt.sim.sleep_until(100.0)
        ls.launch(lsk, 1, 32)
        ls.synchronize()
        be.synchronize()
        recs = {r.name: r for r in rt.sim.trace()}
        l, b = recs["ls"], recs["be"]
        return l.start_us - l.submit_us, b.end_us, l.sms, b.sms


def test_shared_ls_waits_behind_be():
    wait, be_end, _, be_sms = _ls_wait("shared")
    assert len(be_sms) == 132
    assert wait + 100.0 >= be_end - 1000.0 - 1e-6


def test_static_isolates_ls():
    wait, _, ls_sms, be_sms = _ls_wait("static")
    assert wait < 1.0
    assert ls_sms.isdisjoint(be_sms)
    assert len(be_sms) == 68 and ls_sms <= set(range(64))


def test_switching_a_live_runtime_moves_work():
    with make_rt("shared") as rt:
        k = rt.sim.kernel("k", 10.0)
        be = rt.vctx("be", cls="be")
        rt.vctx("ls", cls="ls")
        be.launch(k, 264, 64)
        rt.set_policy("static")
        be.launch(k, 264, 64)
        rt.set_policy("shared")
        be.launch(k, 264, 64)
        be.synchronize()
        sms = [len(r.sms) for r in rt.sim.trace()]
        assert sms == [132, 68, 132]
        assert be.stats().remaps == 2


def test_manual_never_moves_and_remap_does():
    with make_rt("manual") as rt:
        info = rt.info()
        k = rt.sim.kernel("k", 10.0)
        v = rt.vctx("v", cls="ls")
        seen = []
        for p in info.pctx:
            v.remap(p.index)
            v.launch(k, 264, 64)
            seen.append(v.pctx)
        v.synchronize()
        assert seen == [p.index for p in info.pctx]
        assert [len(r.sms) for r in rt.sim.trace()] == [p.sm_count for p in info.pctx]


def test_poll_runs(rt):
    rt.poll()


def test_native_policy_registered_from_python(native_policy):
    calls = ctypes.c_int(0)
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    with make_rt("shared") as rt:
        rt.register_native_policy(
            "pin_low16",
            on_launch=addr(native_policy.test_pin1_on_launch),
            init=addr(native_policy.test_pin1_init),
            user_data=ctypes.addressof(calls),
        )
        assert "pin_low16" in rt.policies
        k = rt.sim.kernel("k", 10.0)
        v = rt.vctx("v")
        v.launch(k, 264, 64)
        rt.policy = "pin_low16"
        v.launch(k, 264, 64)
        v.synchronize()
        assert calls.value == 1
        assert [len(r.sms) for r in rt.sim.trace()] == [132, 16]
        with pytest.raises(detshare.AlreadyExistsError):
            rt.register_native_policy("pin_low16", on_launch=addr(native_policy.test_pin1_on_launch))


def test_policy_limit(native_policy):
    on_launch = ctypes.cast(native_policy.test_hold_on_launch, ctypes.c_void_p).value
    with make_rt() as rt:
        added = 0
        with pytest.raises(detshare.LimitError):
            for i in range(20):
                rt.register_native_policy(f"p{i}", on_launch=on_launch)
                added += 1
        assert added == 16 - len(detshare.BUILTIN_POLICIES)


def test_policy_params_set_get_and_validation(rt):
    assert rt.get_policy_param("slo_aware", "ls_sms") == 64
    rt.set_policy_param("slo_aware", "ls_sms", 32)
    assert rt.get_policy_param("slo_aware", "ls_sms") == 32
    rt.set_policy_param("temporal", "be_window_us", "1e3")
    assert rt.get_policy_param("temporal", "be_window_us") == 1000
    with pytest.raises(detshare.InvalidArgumentError):
        rt.set_policy_param("slo_aware", "ls_sms", 0)  # below the range
    with pytest.raises(detshare.InvalidArgumentError):
        rt.set_policy_param("slo_aware", "ls_sms", 12.5)  # not whole
    with pytest.raises(detshare.InvalidArgumentError):
        rt.set_policy_param("slo_aware", "ls_sms", "many")
    with pytest.raises(detshare.NotFoundError):
        rt.set_policy_param("slo_aware", "no_such", 1)
    with pytest.raises(detshare.NotFoundError):
        rt.set_policy_param("no_such_policy", "ls_sms", 1)
    assert rt.get_policy_param("slo_aware", "ls_sms") == 32  # failures changed nothing

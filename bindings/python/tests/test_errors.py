"""Real library calls that produce each status the simulated device (or a
stand-in driver) can produce, raised as their DetShareError subclasses with the
library's message."""

from __future__ import annotations

import ctypes
import textwrap

import pytest

import detshare
from detshare import _types as T
from detshare._lib import lib
from detshare.errors import check

from conftest import make_rt, run_python


def test_invalid_argument(rt):
    v = rt.vctx("v")
    with pytest.raises(detshare.InvalidArgumentError) as ei:
        v.remap(99)
    assert ei.value.status == 1 and ei.value.function == "ds_vctx_remap"
    assert "99" in ei.value.message
    with pytest.raises(detshare.InvalidArgumentError):
        rt.vctx("bad", initial_pctx=99)
    with pytest.raises(detshare.InvalidArgumentError, match="max_vctx"):
        detshare.Runtime("sim", max_vctx=5000)
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        v.remap(1000)


def test_invalid_handle_from_the_library(rt):
    junk = (ctypes.c_uint64 * 64)()
    with pytest.raises(detshare.InvalidHandleError):
        check(lib().ds_vctx_destroy(ctypes.addressof(junk)), "ds_vctx_destroy")
    with pytest.raises(detshare.InvalidHandleError):
        check(lib().ds_runtime_destroy(None), "ds_runtime_destroy")
    # a destroyed vCtx's raw handle: the library reports it as destroyed
    v = rt.vctx("gone")
    stale = v.handle
    v.close()
    with pytest.raises(detshare.InvalidHandleError) as ei:
        check(lib().ds_vctx_synchronize(stale), "ds_vctx_synchronize")
    assert "destroyed" in ei.value.message


def test_invalid_handle_from_the_binding(rt):
    v = rt.vctx("gone")
    v.close()
    v.close()  # idempotent
    with pytest.raises(detshare.InvalidHandleError, match="gone"):
        v.synchronize()
    r2 = detshare.Runtime("sim")
    w = r2.vctx("orphan")
    r2.close()
    with pytest.raises(detshare.InvalidHandleError):
        r2.info()
    with pytest.raises(detshare.InvalidHandleError):
        w.launch(1, 1, 1)


def test_abi_mismatch():
    cfg = T.ds_runtime_config()
    cfg.device = T.DS_DEVICE_SIM
    cfg.magic = 0
    out = ctypes.c_void_p()
    with pytest.raises(detshare.AbiMismatchError, match="magic"):
        check(lib().ds_runtime_create(ctypes.byref(cfg), ctypes.byref(out)), "ds_runtime_create")
    cfg = T.ds_runtime_config()
    cfg.device = T.DS_DEVICE_SIM
    cfg.size = 16
    with pytest.raises(detshare.AbiMismatchError):
        check(lib().ds_runtime_create(ctypes.byref(cfg), ctypes.byref(out)), "ds_runtime_create")
    with detshare.Runtime("sim") as rt:
        v = rt.vctx("v")
        st = T.ds_vctx_stats()
        st.version = 99
        with pytest.raises(detshare.AbiMismatchError, match="version"):
            check(lib().ds_vctx_get_stats(v.handle, ctypes.byref(st)), "ds_vctx_get_stats")


def test_driver_error_for_a_gpu_too_small_to_split():
    # the simulated driver refuses to split 4 SMs into groups of 8
    with pytest.raises(detshare.DriverError, match="cuDevSmResourceSplitByCount"):
        detshare.Runtime("sim", sim=detshare.SimConfig(sm_count=4))


def test_driver_error_for_a_kernel_of_another_device():
    with detshare.Runtime("sim") as a, detshare.Runtime("sim") as b:
        kb = b.sim.kernel("kb")
        va = a.vctx("va")
        with pytest.raises(detshare.DriverError) as ei:
            va.launch(kb, 1, 32)
        assert ei.value.message


def test_device_fault_is_sticky():
    rt = make_rt("manual")
    bad = rt.sim.kernel("bad", 10.0, faults=True)
    good = rt.sim.kernel("good", 10.0)
    v = rt.vctx("v")
    v.launch(bad, 1, 32)
    with pytest.raises(detshare.DeviceFaultError) as ei:
        v.synchronize()
    assert ei.value.status == 16 and "faulted" in ei.value.message
    with pytest.raises(detshare.DeviceFaultError):
        v.launch(good, 1, 32)
    # teardown still frees everything and reports the fault
    with pytest.raises(detshare.DeviceFaultError):
        rt.close()
    assert rt.closed and v.closed


def test_timeout_when_a_policy_holds_too_long(native_policy):
    hold = ctypes.cast(native_policy.test_hold_on_launch, ctypes.c_void_p).value
    with make_rt("manual", teardown_timeout_ms=5) as rt:
        rt.register_native_policy("hold_all", on_launch=hold)
        v = rt.vctx("v")
        k = rt.sim.kernel("k")
        rt.set_policy("hold_all")
        with pytest.raises(detshare.TimeoutError, match="hold_all"):
            v.launch(k, 1, 32)
        rt.set_policy("manual")
        v.launch(k, 1, 32)
        v.synchronize()


def test_invalid_launch(rt):
    k = rt.sim.kernel("k")
    v = rt.vctx("v")
    with pytest.raises(detshare.InvalidLaunchError):
        v.launch(k, (0, 1, 1), 32)
    with pytest.raises(detshare.InvalidLaunchError):
        v.launch(k, 1, 2048)
    with pytest.raises(detshare.InvalidLaunchError, match="smem"):
        v.launch(k, 1, 32, shared_mem_bytes=1 << 30)
    v.launch(k, 1, 32)
    v.synchronize()
    assert v.stats().launches == 1, "only the good launch reached the device"


def test_busy(rt):
    v = rt.vctx("v")
    with pytest.raises(detshare.BusyError):
        v.release_stream()  # no section open
    with v.section():
        with pytest.raises(detshare.BusyError):
            with v.section():
                pass
    with v.section():  # the section was closed
        pass


def test_not_found(rt):
    with pytest.raises(detshare.NotFoundError, match="nope"):
        rt.set_policy("nope")
    with pytest.raises(LookupError):
        rt.policy = "nope"


def _some_function_address() -> int:
    # Any real code address: registration fails before the hook could be called.
    return ctypes.cast(lib().ds_version, ctypes.c_void_p).value


def test_already_exists(rt):
    with pytest.raises(detshare.AlreadyExistsError, match="shared"):
        rt.register_native_policy("shared", on_launch=_some_function_address())
    with pytest.raises(detshare.InvalidArgumentError, match="on_launch"):
        rt.register_native_policy("custom", on_launch=0)


def test_limit():
    with make_rt(max_vctx=2) as rt:
        a, b = rt.vctx("a"), rt.vctx("b")
        with pytest.raises(detshare.LimitError) as ei:
            rt.vctx("c")
        assert ei.value.status == 15
        b.close()
        rt.vctx("c")  # the slot is free again
        assert a.name == "a"


_CREATE_CUDA = textwrap.dedent(
    """
    import detshare, sys
    try:
        detshare.Runtime("cuda")
    except detshare.DetShareError as e:
        print(type(e).__name__, e.status_name)
        print(e.message)
        sys.exit(0)
    print("created")
    sys.exit(1)
    """
)


def test_no_driver_when_libcuda_is_missing():
    r = run_python(_CREATE_CUDA, {"DS_LIBCUDA": "/nonexistent/libcuda.so.1"})
    assert r.returncode == 0, r.stdout + r.stderr
    first, message = r.stdout.splitlines()[:2]
    assert first == "NoDriverError DS_ERR_NO_DRIVER"
    assert "/nonexistent/libcuda.so.1" in message


@pytest.mark.parametrize(
    "fake,cls,status,needle",
    [
        ("old", "DriverTooOldError", "DS_ERR_DRIVER_TOO_OLD", "11.8"),
        ("nodev", "NoDeviceError", "DS_ERR_NO_DEVICE", ""),
    ],
)
def test_statuses_of_stand_in_drivers(fake_drivers, fake, cls, status, needle):
    r = run_python(_CREATE_CUDA, {"DS_LIBCUDA": str(fake_drivers[fake])})
    assert r.returncode == 0, r.stdout + r.stderr
    first, message = r.stdout.splitlines()[:2]
    assert first == f"{cls} {status}"
    assert needle in message

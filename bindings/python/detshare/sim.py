"""The simulated device (include/detshare/sim.h): a GPU model in virtual time
behind the same driver seam as CUDA, for tests and policy studies without a GPU.

Times are simulated microseconds. In the virtual clock (default) time moves
only when the host waits (synchronize, :meth:`SimDevice.sleep_until`), so a
test's timings are exact::

    with detshare.Runtime("sim", policy="shared") as rt:
        k = rt.sim.kernel("gemm", block_us=100.0, param_sizes=[8, 4])
        v = rt.vctx("be")
        v.launch(k, grid=264, block=128, params=[ctypes.c_uint64(1), ctypes.c_int(2)])
        v.synchronize()
        (rec,) = rt.sim.trace()
        assert rec.params == bytes(ctypes.c_uint64(1)) + bytes(ctypes.c_int(2))
"""

from __future__ import annotations

from ctypes import byref, c_double, c_size_t, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, FrozenSet, List, Literal, Optional, Sequence, Tuple

from . import _types as T
from ._lib import lib
from .errors import check
from .runtime import Dim, _dim3, _handle, _param_array, _ptr, _real, _str, _u32

if TYPE_CHECKING:  # pragma: no cover
    from .runtime import Runtime


@dataclass
class SimConfig:
    """Shape of the simulated GPU (``ds_sim_config``). The integer fields
    are checked against 0..2**32-1 (``TypeError`` for a non-int,
    :class:`~detshare.errors.InvalidArgumentError` out of range) and the
    float fields for being numbers when the runtime is created; the library
    checks their values (e.g. ``sm_count`` 1 to 256, ``time_scale`` > 0 and
    finite)."""

    sm_count: int = 132  #: SMs (H100/H200: 132)
    min_partition_sms: int = 8  #: minSmPartitionSize
    sm_alignment: int = 8  #: smCoscheduledAlignment
    clock: Literal["virtual", "realtime"] = "virtual"
    time_scale: float = 1.0  #: realtime clock: wall us per simulated us
    launch_overhead_us: float = 0.0  #: simulated host cost per launch, us
    trace_capacity: int = 65536  #: kernel records kept (ring); 0 = none

    def _to_c(self) -> T.ds_sim_config:
        fn = "SimConfig"
        c = T.ds_sim_config()
        c.sm_count = _u32("sm_count", self.sm_count, fn)
        c.min_partition_sms = _u32("min_partition_sms", self.min_partition_sms, fn)
        c.sm_alignment = _u32("sm_alignment", self.sm_alignment, fn)
        if self.clock not in ("virtual", "realtime"):
            raise ValueError(f"clock must be 'virtual' or 'realtime', not {self.clock!r}")
        c.clock = T.DS_SIM_CLOCK_REALTIME if self.clock == "realtime" else T.DS_SIM_CLOCK_VIRTUAL
        c.time_scale = _real("time_scale", self.time_scale, fn)
        c.launch_overhead_us = _real("launch_overhead_us", self.launch_overhead_us, fn)
        c.trace_capacity = _u32("trace_capacity", self.trace_capacity, fn)
        return c


@dataclass(frozen=True)
class SimKernel:
    """A simulated kernel: each block runs ``block_us`` on one SM;
    ``blocks_per_sm`` fit on an SM at once. Pass it (or ``.handle``) wherever
    a CUfunction is taken."""

    handle: int  #: the CUfunction, as int
    name: str
    block_us: float
    blocks_per_sm: int
    param_sizes: Tuple[int, ...]  #: bytes of each parameter

    def __int__(self) -> int:
        return self.handle

    __index__ = __int__


@dataclass(frozen=True)
class SimKernelRecord:
    """One kernel as the simulated device ran it (``ds_sim_kernel_record``)."""

    seq: int  #: launch order on the device, from 0
    function: int
    name: str
    stream: int
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    shared_mem_bytes: int
    params: bytes  #: the parameters as the driver received them, concatenated
    submit_us: float  #: simulated time of the launch
    start_us: float  #: first block started, -1 if not yet
    end_us: float  #: last block finished, -1 if not yet
    sms: FrozenSet[int]  #: SMs that ran at least one block


def _record(r: T.ds_sim_kernel_record) -> SimKernelRecord:
    return SimKernelRecord(
        seq=r.seq,
        function=r.function or 0,
        name=r.name.decode("utf-8", "replace"),
        stream=r.stream or 0,
        grid=(r.grid.x, r.grid.y, r.grid.z),
        block=(r.block.x, r.block.y, r.block.z),
        shared_mem_bytes=r.shared_mem_bytes,
        params=bytes(r.params[: r.param_bytes]),
        submit_us=r.submit_us,
        start_us=r.start_us,
        end_us=r.end_us,
        sms=frozenset(s for s in range(T.DS_MAX_SMS) if r.sm_mask[s // 64] >> (s % 64) & 1),
    )


class SimDevice:
    """Helpers of a runtime on the simulated device (``Runtime.sim``)."""

    def __init__(self, runtime: "Runtime") -> None:
        self.runtime = runtime
        # Fails with NotSupportedError on a CUDA runtime.
        self.now_us()

    def kernel(
        self,
        name: str,
        block_us: float = 10.0,
        *,
        blocks_per_sm: int = 1,
        param_sizes: Sequence[int] = (),
        faults: bool = False,
    ) -> SimKernel:
        """Creates a simulated kernel (``ds_sim_kernel_create``); it lives until
        the runtime is destroyed.

        Args:
            name: shown in trace records.
            block_us: duration of one block, simulated us (> 0).
            blocks_per_sm: 1, 2, 4 or 8.
            param_sizes: bytes of each parameter (at most 16); the trace
                records that many bytes of each.
            faults: the kernel faults (an illegal address) when its first
                block starts; as on a GPU the fault is sticky and later calls
                raise :class:`~detshare.errors.DeviceFaultError`.

        Raises:
            InvalidArgumentError: ``block_us`` not > 0 and finite (NaN, an
                infinity), ``blocks_per_sm`` not 1, 2, 4 or 8 (the
                library); ``blocks_per_sm`` or a parameter size outside
                0..2**32-1 (the binding).
            ValueError: more than 16 parameters.
            TypeError: ``name`` not a str, ``block_us`` not a number,
                ``blocks_per_sm`` or a parameter size not an int,
                ``param_sizes`` not a sequence.
        """
        fn = "SimDevice.kernel"
        d = T.ds_sim_kernel_desc()
        nb = _str("name", name, fn).encode()
        d.name = nb
        d.block_us = _real("block_us", block_us, fn)
        d.blocks_per_sm = _u32("blocks_per_sm", blocks_per_sm, fn)
        if isinstance(param_sizes, (str, bytes)) or not isinstance(param_sizes, Sequence):
            raise TypeError(f"{fn}: param_sizes must be a sequence of ints, not {type(param_sizes).__name__}")
        if len(param_sizes) > T.DS_SIM_MAX_PARAMS:
            raise ValueError(f"at most {T.DS_SIM_MAX_PARAMS} parameters")
        d.num_params = len(param_sizes)
        for i, s in enumerate(param_sizes):
            d.param_sizes[i] = _u32(f"param_sizes[{i}]", s, fn)
        d.faults = int(bool(faults))
        out = c_void_p()
        check(lib().ds_sim_kernel_create(self.runtime.handle, byref(d), byref(out)), "ds_sim_kernel_create")
        return SimKernel(out.value or 0, name, block_us, blocks_per_sm, tuple(param_sizes))

    def launch_on_stream(
        self, stream: int, function: Any, grid: Dim, block: Dim, params: Optional[Sequence[Any]] = None
    ) -> None:
        """Launches a simulated kernel straight onto a stream, as a library
        (cuBLAS, PyTorch) would inside a section (``ds_sim_launch_on_stream``).

        Args:
            stream: the ``CUstream`` as int (a section's), 0 or ``None`` =
                the device's default stream.
            function, grid, block, params: as for :meth:`VCtx.launch`.

        Raises:
            InvalidArgumentError: ``function`` 0 or not a simulated kernel
                (the library); ``stream`` or ``function`` outside
                0..2**64-1, a dimension outside 0..2**32-1 (the binding).
            InvalidLaunchError: zero or oversized dimensions.
            TypeError: an argument of the wrong type (the message names it).
        """
        fn = "SimDevice.launch_on_stream"
        s = _ptr("stream", stream, fn, none_ok=True)
        f = _handle(function, "function", fn)
        g = _dim3(grid, "grid", fn)
        b = _dim3(block, "block", fn)
        arr = _param_array(params, fn)
        check(lib().ds_sim_launch_on_stream(self.runtime.handle, s, f, g, b, arr), "ds_sim_launch_on_stream")

    def now_us(self) -> float:
        """Current simulated time, us."""
        t = c_double()
        check(lib().ds_sim_now_us(self.runtime.handle, byref(t)), "ds_sim_now_us")
        return t.value

    def sleep_until(self, t_us: float) -> None:
        """Advances simulated time to ``t_us`` (virtual clock) or sleeps until it
        (realtime clock); work runs meanwhile.

        Raises:
            InvalidArgumentError: ``t_us`` NaN or infinite.
            TypeError: ``t_us`` not a number.
        """
        t = _real("t_us", t_us, "SimDevice.sleep_until")
        check(lib().ds_sim_sleep_until(self.runtime.handle, t), "ds_sim_sleep_until")

    def trace(self) -> List[SimKernelRecord]:
        """Every kernel record kept, oldest first (running kernels have
        ``end_us == -1``)."""
        cap = 256
        while True:
            buf = (T.ds_sim_kernel_record * cap)()
            n = c_size_t()
            check(lib().ds_sim_trace_get(self.runtime.handle, buf, cap, byref(n)), "ds_sim_trace_get")
            if n.value < cap:
                return [_record(buf[i]) for i in range(n.value)]
            cap *= 4

    def trace_clear(self) -> None:
        """Drops every kept record (sequence numbers keep counting)."""
        check(lib().ds_sim_trace_clear(self.runtime.handle), "ds_sim_trace_clear")


__all__ = ["SimConfig", "SimDevice", "SimKernel", "SimKernelRecord"]

"""Runtime, virtual contexts, launches and sections.

Units follow the C API: durations in microseconds (``*_us``) or milliseconds
(``*_ms``) as the name says, SM counts in SMs, stream handles as ``int``
(``CUstream`` values), kernel handles as ``int`` (``CUfunction`` values).

Thread-safety is the library's (include/detshare/detshare.h): a :class:`VCtx`
belongs to one thread at a time (its launches, sections, synchronize and
destroy); :meth:`VCtx.remap`, the gate actions (:meth:`VCtx.gate_close`,
:meth:`VCtx.gate_open`, :meth:`VCtx.set_gate_interval`), queries and the
``stats()`` methods, and request accounting (:meth:`VCtx.request_begin`,
:meth:`VCtx.request_end`, :meth:`VCtx.request_record`, :meth:`VCtx.request`)
may come from any thread. A :class:`Graph` follows its vCtx: made, replayed
and destroyed on the vCtx's owner thread, its :meth:`Graph.stats` read from
any. Every call into the library releases the GIL (ctypes).
"""

from __future__ import annotations

import ctypes
import enum
import math
import operator
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager
from ctypes import POINTER, byref, c_char_p, c_double, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass, fields
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from . import _types as T
from ._lib import lib
from .errors import DS_SUCCESS, DetShareError, DeviceFaultError, InvalidArgumentError, InvalidHandleError, check

if TYPE_CHECKING:  # pragma: no cover
    from .sim import SimConfig, SimDevice

BUILTIN_POLICIES: Tuple[str, ...] = (
    "slo_aware",
    "tpot_first",
    "shared",
    "priority",
    "static",
    "temporal",
    "slo_aware_nogates",
    "balance",
    "manual",
)
"""Policies every runtime has (include/detshare/policy.h); ``slo_aware`` is
the default."""

DEFAULT_POLICY = "slo_aware"


class VCtxClass(enum.IntEnum):
    """``ds_vctx_class``."""

    BEST_EFFORT = T.DS_CLASS_BEST_EFFORT
    LATENCY_SENSITIVE = T.DS_CLASS_LATENCY_SENSITIVE


class Phase(enum.IntEnum):
    """``ds_phase``: what a kernel is part of (used by ``tpot_first``)."""

    NONE = T.DS_PHASE_NONE
    PREFILL = T.DS_PHASE_PREFILL
    DECODE = T.DS_PHASE_DECODE


class Anchor(enum.IntEnum):
    """``ds_tier_anchor``: which end of the SM split a pCtx's groups come from."""

    LOW = T.DS_ANCHOR_LOW
    HIGH = T.DS_ANCHOR_HIGH
    FULL = T.DS_ANCHOR_FULL


class GateMode(enum.IntEnum):
    """``ds_gate_mode``: who writes a vCtx's gate word (see :meth:`VCtx.gate_close`).

    Measured on an H200, from the decision to the gated kernel visibly
    running (docs/results/h200/overhead.json): host-written words are the faster.
    """

    AUTO = T.DS_GATES_AUTO  #: the faster of the two on the measured GPUs: HOST
    HOST = T.DS_GATES_HOST  #: pinned host memory mapped into the device, written by the host
    RCK = T.DS_GATES_RCK  #: device memory mirrored by the resident control kernel; needs ``rck=True``
    OFF = T.DS_GATES_OFF  #: no gates: policies bound BE work with windows alone


class RckMode(enum.IntEnum):
    """``ds_rck_mode``: the resident control kernel (see :class:`Runtime` for
    its costs and hazards)."""

    OFF = T.DS_RCK_OFF  #: the default
    ON = T.DS_RCK_ON


GATES_NONE: int = T.DS_GATES_NONE
"""``DS_GATES_NONE`` (0xFFFFFFFF): the gate interval of a vCtx without gates,
what ``VCtx.set_gate_interval(None)`` passes."""

REQUEST_WINDOW: int = T.DS_REQUEST_WINDOW
"""``DS_REQUEST_WINDOW`` (256): how many of a vCtx's latest requests
``VCtxStats.request_p50_us`` and ``request_p99_us`` are taken over."""

VCTX_GROUP_NAME_MAX: int = T.DS_VCTX_GROUP_NAME_MAX
"""``DS_VCTX_GROUP_NAME_MAX`` (47): the longest vCtx group name, characters."""
VCTX_GROUP_MAX_RANKS: int = T.DS_VCTX_GROUP_MAX_RANKS
"""``DS_VCTX_GROUP_MAX_RANKS`` (64): the most ranks in a vCtx group."""

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1
_PTR_MAX = 2 ** (8 * ctypes.sizeof(c_void_p)) - 1


def _where(function: str) -> str:
    return f"{function}: " if function else ""


def _int(name: str, value: Any, lo: int, hi: Optional[int], function: str = "") -> int:
    """``value`` for a C integer field or argument that holds ``lo..hi``
    (``hi`` None: no upper bound),
    checked before ctypes sees it (ctypes wraps an out-of-range int silently,
    2**32 + 100 into a uint32_t as 100). An int, or an object with
    ``__index__`` (a NumPy integer); not a bool, not a float (whose fraction
    C would drop).

    Raises:
        TypeError: not an int (the message names ``name``).
        InvalidArgumentError: outside ``lo..hi`` (the message names ``name``
            and the range).
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        shown = f" {value!r}" if isinstance(value, float) else ""
        raise TypeError(f"{_where(function)}{name} must be an int, not {type(value).__name__}{shown}")
    v = operator.index(value)
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise InvalidArgumentError(f"{name} must be {rng}, not {value!r}", function=function)
    return v


def _u32(name: str, value: Any, function: str = "") -> int:
    """A ``uint32_t``: an int in 0..2**32-1 (:func:`_int`)."""
    return _int(name, value, 0, _U32_MAX, function)


def _i32(name: str, value: Any, function: str = "") -> int:
    """An ``int32_t`` / ``int``: an int in -2**31..2**31-1 (:func:`_int`)."""
    return _int(name, value, _I32_MIN, _I32_MAX, function)


def _real(name: str, value: Any, function: str = "") -> float:
    """A ``double``: an int or a float (not a bool, a string or None); the
    library checks the value itself (NaN, infinities, its range). An int
    beyond a double becomes an infinity, which the library refuses."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(type(value), "__float__"):
        raise TypeError(f"{_where(function)}{name} must be a number, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _ptr(name: str, value: Any, function: str = "", *, none_ok: bool = False) -> Optional[int]:
    """A pointer-sized handle (``CUstream``, ``CUgraph``, a hook's address)
    as int: 0..2**64-1; ``None`` only where ``none_ok`` (NULL)."""
    if value is None and none_ok:
        return None
    return _int(name, value, 0, _PTR_MAX, function)


def _str(name: str, value: Any, function: str = "") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{_where(function)}{name} must be a str, not {type(value).__name__}")
    return value


GRAPH_SEGMENT_MIN_US: int = T.DS_GRAPH_SEGMENT_MIN_US
"""``DS_GRAPH_SEGMENT_MIN_US`` (100): the smallest nonzero ``segment_us`` of a graph."""
GRAPH_SEGMENT_MAX_US: int = T.DS_GRAPH_SEGMENT_MAX_US
"""``DS_GRAPH_SEGMENT_MAX_US`` (10 s): the largest ``segment_us`` of a graph."""
GRAPH_MAX_SEGMENTS: int = T.DS_GRAPH_MAX_SEGMENTS
"""``DS_GRAPH_MAX_SEGMENTS`` (4096): the most pieces and segments one graph may have."""


def _segment_us(value: Any, function: str = "") -> int:
    """``ds_graph_attr::segment_us``: 0, or ``GRAPH_SEGMENT_MIN_US`` to
    ``GRAPH_SEGMENT_MAX_US``; checked here so the error names the argument."""
    v = _u32("segment_us", value, function)
    if v != 0 and not T.DS_GRAPH_SEGMENT_MIN_US <= v <= T.DS_GRAPH_SEGMENT_MAX_US:
        raise InvalidArgumentError(f"segment_us must be 0 (no automatic cuts) or {T.DS_GRAPH_SEGMENT_MIN_US}.."
                                   f"{T.DS_GRAPH_SEGMENT_MAX_US} us, not {value!r}", function=function)
    return v


def _graph_args(name: Any, pctxs: Any, segment_us: Any,
                function: str) -> Tuple[Optional[str], Optional[Tuple[int, ...]], int]:
    """The checked ``name``, ``pctxs`` and ``segment_us`` of a graph, before
    anything runs or is made."""
    if name is not None:
        _str("name", name, function)
    seg = _segment_us(segment_us, function)
    if pctxs is None:
        return name, None, seg
    if isinstance(pctxs, (str, bytes)) or not isinstance(pctxs, Sequence):
        raise TypeError(f"{function}: pctxs must be a sequence of pool indices or None, not {type(pctxs).__name__}")
    return name, tuple(_u32(f"pctxs[{i}]", p, function) for i, p in enumerate(pctxs)), seg


class LogLevel(enum.IntEnum):
    """``ds_log_level``."""

    NONE = 0
    ERROR = 1
    WARN = 2
    INFO = 3
    DEBUG = 4


_CLASS_NAMES = {
    "be": VCtxClass.BEST_EFFORT,
    "best_effort": VCtxClass.BEST_EFFORT,
    "ls": VCtxClass.LATENCY_SENSITIVE,
    "latency_sensitive": VCtxClass.LATENCY_SENSITIVE,
}


def _enum(kind: type, value: Any, aliases: Optional[Dict[str, Any]] = None, *, name: str = "",
          function: str = "", bool_ok: bool = False) -> Any:
    """``value`` as the enum ``kind``: a member, its name (any case) or an
    alias, or its int value (a bool only where ``bool_ok``).

    Raises:
        ValueError: a name or an int that is no member.
        TypeError: anything else (the message names ``name``).
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if aliases and key in aliases:
            return aliases[key]
        try:
            return kind[key.upper()]  # type: ignore[index]
        except KeyError:
            names = sorted({*(m.lower() for m in kind.__members__), *(aliases or {})})
            raise ValueError(f"{value!r} is not a {kind.__name__}: one of {', '.join(names)}") from None
    if (isinstance(value, bool) and not bool_ok) or not hasattr(type(value), "__index__"):
        what = name or kind.__name__
        raise TypeError(f"{_where(function)}{what} must be a {kind.__name__}, its name or its int value, "
                        f"not {type(value).__name__}")
    return kind(operator.index(value))


@dataclass(frozen=True)
class Tier:
    """One pCtx of the pool: ``sm_count`` SMs (rounded up to whole 8-SM groups
    by the library) from the ``anchor`` end of the split. ``sm_count`` is
    ignored for ``Anchor.FULL``."""

    sm_count: int
    anchor: Union[Anchor, str] = Anchor.LOW


@dataclass(frozen=True)
class PCtxInfo:
    """A pCtx of the pool (``ds_pctx_info``)."""

    index: int  #: pool index, what :meth:`VCtx.remap` takes
    sm_count: int  #: SMs in this pCtx
    anchor: Anchor
    groups: Tuple[int, ...]  #: split groups it is made of
    complement: Optional[int]  #: pCtx made of exactly the other groups, if any


@dataclass(frozen=True)
class RuntimeInfo:
    """What a runtime runs on (``ds_runtime_info``)."""

    device: str  #: "cuda" or "sim"
    device_name: str
    driver_version: int  #: e.g. 13000 for CUDA 13.0; 0 on the simulated device
    compute_capability: int  #: major*10+minor; 0 on the simulated device
    sm_count: int  #: SMs of the device
    min_partition_sms: int
    sm_alignment: int
    group_sm_counts: Tuple[int, ...]  #: SMs of each split group
    pctx: Tuple[PCtxInfo, ...]  #: the pool
    pool_build_ms: float  #: wall time to split and build the pool, ms
    max_connections: int  #: CUDA_DEVICE_MAX_CONNECTIONS in force
    connections_needed: int
    stream_priority_least: int
    stream_priority_greatest: int
    local_cpus: str  #: CPUs near the GPU, hwloc list syntax
    numa_node: int  #: -1 if unknown

    @property
    def full_pctx(self) -> int:
        """Index of the whole-GPU pCtx."""
        for p in self.pctx:
            if p.anchor == Anchor.FULL:
                return p.index
        return 0


@dataclass(frozen=True)
class VCtxStats:
    """Per-vCtx counters (``ds_vctx_stats``). The ``request*`` fields are the
    request latency accounting (:meth:`VCtx.request`): the window keeps each
    latency as a 32-bit float, so ``request_p50_us`` and ``request_p99_us``
    are the recorded values to about 7 significant digits."""

    launches: int  #: kernels launched through ds_launch
    sections: int  #: sections closed
    remaps: int  #: remaps carried out
    sampled_kernels: int  #: launches timed with events
    kernel_time_ns: int  #: summed device time of the sampled kernels, ns
    pctx: int  #: bound pCtx
    streams: int  #: streams this vCtx has created
    holds: int  #: launches or sections a policy held before dispatch
    window_us: int  #: bound on predicted work in flight, us (0 = none)
    urgent: bool  #: running on its highest-priority stream
    inflight_us: float  #: predicted work submitted and not known finished, us
    gate_interval_us: Optional[int]  #: predicted work between its gates, us; None = no gates
    gate_closed: bool  #: its gate is closed now
    gates: int  #: gates placed in its streams
    gate_closes: int  #: times its gate was closed
    gate_closed_us: int  #: time its gate spent closed, us (closures that ended)
    gate_holds: int  #: launches or sections that waited for its gate to open
    overruns: int  #: watchdog events: tracked work that ran far past its profile
    graph_launches: int  #: graphs launched through :meth:`Graph.replay` (not counted in ``launches``)
    requests: int  #: requests ended or recorded (:meth:`VCtx.request_end`, :meth:`VCtx.request_record`)
    requests_over_slo: int  #: of them, slower than the vCtx's ``slo_us`` (0 without an SLO)
    #: runs of consecutive requests over the SLO (in the order they ended): those over it that
    #: follow one within it, or come first; ``requests_over_slo`` over this is the mean run length
    requests_over_slo_runs: int
    #: requests in the sliding window: the last :data:`REQUEST_WINDOW` (fewer before that many)
    request_window: int
    request_window_over_slo: int  #: of those, slower than the SLO
    #: median request latency over the window, us (nearest rank: the
    #: ceil(n/2)-th smallest); 0.0 while empty
    request_p50_us: float
    #: 99th percentile request latency over the window, us (nearest rank: the
    #: ceil(0.99*n)-th smallest); 0.0 while empty
    request_p99_us: float
    #: yields: times this best-effort vCtx was moved to a pCtx with fewer SMs
    #: (:meth:`VCtx.remap`, a policy's placement) while it had work where it
    #: was, and that work has finished
    yields: int
    #: median time from the request that moved it until its work on the
    #: larger pCtx finished, us, over the last 256 yields (resolution: one
    #: scheduler pass, ``Runtime(scheduler_period_us=...)``); 0.0 before any
    yield_p50_us: float
    yield_p99_us: float  #: 99th percentile (nearest rank) of the same, us
    yield_max_us: float  #: the longest of the same, us
    #: in a vCtx group (``Runtime.vctx(group=...)``): units (launches,
    #: sections, graph replays or their segments) this rank decided (rank 0)
    #: or followed; 0 outside one
    group_units: int
    #: host time its units waited for the other ranks, us (wall clock): rank 0
    #: for the slowest rank to come within 256 units, a rank > 0 for rank 0's
    #: decisions; 0.0 outside a group
    group_wait_us: float


@dataclass(frozen=True)
class RuntimeStats:
    """Runtime-wide figures of gates, the resident control kernel and the
    watchdog (``ds_runtime_stats``)."""

    gates: GateMode  #: gate writer in force (AUTO resolved; OFF when the driver lacks what gates need)
    rck_running: bool  #: the RCK is resident; whether it still beats is heartbeat_age_us
    rck_sm_count: int  #: SMs of the group the RCK runs on, 0 without it
    rck_beats: int  #: heartbeats the RCK wrote
    #: since the watchdog last saw the heartbeat advance, us; -1 without the RCK
    #: or before the watchdog first saw it beat
    heartbeat_age_us: float
    heartbeat_misses: int  #: watchdog events: heartbeat missing for heartbeat_timeout_ms
    overruns: int  #: watchdog events: work far past its profile (every vCtx's, destroyed ones included)
    boundaries: int  #: gate boundaries the RCK timestamped
    rck_profile_samples: int  #: kernel durations the profiles took from those timestamps
    gates_closed: int  #: gates closed now
    max_closed_gates: int  #: gates that may be closed now, closed ones included (6 with the default 8 connections)
    gate_refusals: int  #: closes refused (LimitError) for want of hardware queues
    gate_expiries: int  #: gates the runtime reopened after they stayed closed for the teardown timeout


Dim = Union[int, Sequence[int]]
"""Grid or block dimensions: ``n`` or ``(x[, y[, z]])``."""

StreamKind = Literal["auto", "torch", "raw"]


def _dim3(d: Dim, what: str, function: str = "") -> T.ds_dim3:
    """Grid or block dimensions: an int or a sequence of 1 to 3 ints, each in
    0..2**32-1 (the library refuses 0 and what the device cannot run)."""
    if isinstance(d, bool) or isinstance(d, (str, bytes)) or not (
            hasattr(type(d), "__index__") or isinstance(d, Sequence)):
        raise TypeError(f"{_where(function)}{what} must be an int or a sequence of 1 to 3 ints, "
                        f"not {type(d).__name__}")
    if hasattr(type(d), "__index__"):
        return T.ds_dim3(_u32(what, d, function), 1, 1)
    if not 1 <= len(d) <= 3:
        raise ValueError(f"{_where(function)}{what}: 1 to 3 dimensions, got {tuple(d)}")
    t = tuple(_u32(f"{what}[{i}]", v, function) for i, v in enumerate(d))
    t = t + (1,) * (3 - len(t))
    return T.ds_dim3(*t)


def _param_array(params: Optional[Sequence[Any]],
                 function: str = "") -> Optional[ctypes.Array]:  # type: ignore[type-arg]
    """kernelParams for cuLaunchKernel: an array of pointers to each parameter.
    Parameters must be ctypes instances (c_int, c_float, c_void_p, Structure,
    arrays), whose bytes are what the kernel receives."""
    if params is None:
        return None
    if isinstance(params, (str, bytes, ctypes._SimpleCData, ctypes.Structure, ctypes.Union)) or not (
            hasattr(params, "__len__") and hasattr(params, "__iter__")):
        raise TypeError(f"{_where(function)}params must be a sequence of ctypes objects or None, "
                        f"not {type(params).__name__}")
    ptrs = (c_void_p * max(len(params), 1))()
    for i, p in enumerate(params):
        if not isinstance(p, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
            raise TypeError(
                f"{_where(function)}kernel parameter {i} is {type(p).__name__}: give ctypes objects "
                "(e.g. ctypes.c_int(3), ctypes.c_void_p(ptr)) so their size is explicit"
            )
        ptrs[i] = ctypes.addressof(p)
    return ptrs


def _handle(f: Any, name: str = "function", function: str = "") -> int:
    """A CUfunction as int: an int (0..2**64-1), an object with an int
    ``handle`` / ``ptr`` (:class:`~detshare.sim.SimKernel`, CuPy's
    ``RawKernel.kernel``), or one that ``int()`` converts (cuda-python's
    ``CUfunction``)."""
    if not (hasattr(type(f), "__index__") and not isinstance(f, bool)):
        for attr in ("handle", "ptr"):
            v = getattr(f, attr, None)
            if isinstance(v, int) and not isinstance(v, bool):
                f = v
                break
        else:
            if hasattr(type(f), "__int__") and not isinstance(f, (bool, float, complex, str, bytes)):
                return _int(name, int(f), 0, _PTR_MAX, function)  # cuda-python's CUfunction
            raise TypeError(f"{_where(function)}{name} must be a CUfunction as int or an object with an int "
                            f"'handle' or 'ptr' (e.g. a SimKernel), not {type(f).__name__}")
    return _int(name, f, 0, _PTR_MAX, function)


def _s(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""


_D = TypeVar("_D")


def _from_struct(cls: Type[_D], st: Any, **converted: Any) -> _D:
    """The dataclass ``cls`` filled from the library struct ``st``: each field
    is the struct's field of the same name, as ctypes reads it, except those
    given in ``converted`` (fields the binding turns into enums, bools,
    strings, tuples or None)."""
    same = {f.name: getattr(st, f.name) for f in fields(cls) if f.name not in converted}  # type: ignore[arg-type]
    return cls(**same, **converted)


# ---------------------------------------------------------------------------
# logging


_log_cb: Optional[Any] = None  # keeps the ctypes callback alive
_log_lock = threading.Lock()


def set_log_handler(
    handler: Optional[Callable[[LogLevel, str], None]], level: Union[LogLevel, int] = LogLevel.WARN
) -> None:
    """Routes the library's log lines to ``handler(level, message)`` (called on
    the thread that raised the message, the scheduler thread included; it must
    not call back into libdetshare). ``None`` drops every message (the
    library's default). ``DS_LOG_LEVEL`` in the environment overrides
    ``level``.

    Raises:
        TypeError: ``handler`` neither callable nor ``None``; ``level`` not
            a :class:`LogLevel` or an int.
        InvalidArgumentError: ``level`` outside C's ``int``.
    """
    global _log_cb
    if handler is not None and not callable(handler):
        raise TypeError(f"set_log_handler: handler must be callable or None, not {type(handler).__name__}")
    lvl = _i32("level", level, "set_log_handler")
    with _log_lock:
        if handler is None:
            cb = T.DS_LOG_FN()
        else:

            def trampoline(lvl: int, msg: Optional[bytes], _user: Optional[int]) -> None:
                try:
                    handler(LogLevel(lvl), _s(msg))
                except Exception:  # never let an exception cross into C
                    pass

            cb = T.DS_LOG_FN(trampoline)
        check(lib().ds_log_set_handler(cb, None, lvl), "ds_log_set_handler")
        _log_cb = cb


def log_to_logging(level: Union[LogLevel, int] = LogLevel.WARN, logger: Optional[Any] = None) -> None:
    """Sends the library's log lines to :mod:`logging` (logger ``detshare``)."""
    import logging

    lg = logger or logging.getLogger("detshare")
    py = {
        LogLevel.ERROR: logging.ERROR,
        LogLevel.WARN: logging.WARNING,
        LogLevel.INFO: logging.INFO,
        LogLevel.DEBUG: logging.DEBUG,
    }
    set_log_handler(lambda lvl, msg: lg.log(py.get(lvl, logging.INFO), "%s", msg), level)


def library_version() -> Tuple[int, int, int]:
    """Version of the loaded library, (major, minor, patch)."""
    code = lib().ds_version()
    return code // 10000, (code // 100) % 100, code % 100


class Request:
    """One request begun by :meth:`VCtx.request` (the ``with`` target).

    Attributes:
        vctx: the vCtx that serves it.
        start: what :meth:`VCtx.request_begin` returned (its start on the
            runtime's clock, an opaque nonzero int).
        latency_us: its latency, us, once the ``with`` block has ended it;
            ``None`` before, or when the vCtx was closed inside the block
            (nothing was recorded then).
    """

    __slots__ = ("vctx", "start", "latency_us")

    def __init__(self, vctx: "VCtx", start: int) -> None:
        self.vctx = vctx
        self.start = start
        self.latency_us: Optional[float] = None

    def __repr__(self) -> str:
        state = "open" if self.latency_us is None else f"{self.latency_us:g} us"
        return f"<detshare.Request of vCtx '{self.vctx.name}' {state}>"


# ---------------------------------------------------------------------------
# runtime


class Runtime:
    """A libdetshare runtime for one device: its pCtx pool, policies and vCtxs.

    Use it as a context manager (or call :meth:`close`)::

        with detshare.Runtime("sim", policy="shared") as rt:
            v = rt.vctx("decode", cls="ls", slo_us=500)
            ...

    Args:
        device: ``"cuda"`` (the GPU through libcuda.so.1) or ``"sim"`` (the
            simulated device, virtual time; see :mod:`detshare.sim`).
        policy: active policy at creation (``None`` = ``"slo_aware"``).
        tiers: pool layout, a list of :class:`Tier` or ``(sm_count, anchor)``
            tuples; ``None`` = the library's default layout.
        device_ordinal: CUDA device ordinal.
        max_vctx: vCtxs alive at once (0 = 64).
        teardown_timeout_ms: bound on waiting for in-flight work at destroy, ms
            (0 = ``DS_TEARDOWN_TIMEOUT_MS`` or 10000).
        scheduler_period_us: scheduler thread pass period, us (0 = 100; < 0 =
            no thread: call :meth:`poll`).
        ls_sms: SMs of the latency-sensitive LOW tier the built-in policies use
            (0 = 64).
        idle_us: ``slo_aware``: LS idle this long lets BE expand, us (0 = 2000).
        be_window_us: BE window while sharing SMs with LS, and ``temporal``'s
            slice, us (0 = 2000).
        sim: simulated-device shape (``device="sim"`` only; ``None`` = defaults).
        gates: who writes the gate words (:class:`GateMode` or ``"auto"``,
            ``"host"``, ``"rck"``, ``"off"``); ``"auto"`` (default) means
            ``"host"``, or ``"off"`` with a warning when the driver lacks
            stream memory operations. ``"rck"`` needs ``rck=True``.
        rck: the resident control kernel (:class:`RckMode`, a bool, or
            ``"on"`` / ``"off"``); off by default. Read its hazards below.
        gate_interval_us: predicted work between two gates of a vCtx that the
            built-in policies gate, us (0 = 100).
        heartbeat_timeout_ms: with the RCK, a heartbeat missing this long is a
            watchdog event (``on_congestion``, ``RuntimeStats.heartbeat_misses``),
            ms (0 = 10).
        fault_presume_ms: with the RCK, a heartbeat missing this long makes
            the runtime presume a device fault before the driver reports it
            (:class:`~detshare.errors.DeviceFaultError`), ms (0 = 50;
            ``None`` or 0xFFFFFFFF = never presume, wait for the driver).

    The resident control kernel (RCK) is one persistent thread on a green
    context over the last SM group of the split. It mirrors gate words
    (``gates="rck"``), timestamps gate boundaries (profile samples without
    events) and beats a heartbeat the watchdog reads: a kernel that traps
    stops it within about 0.5 ms, long before the driver reports the fault.
    Its costs and hazards, measured on an H200:

    - while it runs, device-wide synchronization, frees and module loads of
      the device's primary context block until the runtime is closed (a
      persistent kernel is never "done"): ``torch.cuda.synchronize()``,
      ``cudaDeviceSynchronize`` / ``cuCtxSynchronize``, ``cudaFree`` /
      ``cuMemFree`` (PyTorch's ``torch.cuda.empty_cache()`` included) and
      ``cuModuleLoad*`` (a library's first use of its kernels, also with
      ``CUDA_MODULE_LOADING=EAGER``); allocations, copies, stream creation and
      launches do not. Enable it only in processes that load and warm every
      library before creating the runtime, synchronize streams or events,
      never the whole device, and free device memory after :meth:`close`;
    - it takes a block slot on one SM: cuBLAS bf16 GEMMs on the whole GPU ran
      13% (8192^3) to 24% (4096^3) longer while it was resident;
    - it keeps one hardware queue (``CUDA_DEVICE_MAX_CONNECTIONS``) busy, one
      closed gate fewer (``RuntimeStats.max_closed_gates``);
    - it needs an SM group no LOW tier uses (``tiers`` whose LOW tiers cover
      the whole GPU raise :class:`~detshare.errors.NotSupportedError`).

    Raises:
        DetShareError: the status of ``ds_runtime_create`` (e.g.
            :class:`~detshare.errors.NoDriverError` without a GPU driver,
            :class:`~detshare.errors.InvalidArgumentError` for ``gates="rck"``
            without the RCK).
        InvalidArgumentError: raised by the binding before anything is
            created, an integer argument outside its C field's range
            (the message names it): ``device_ordinal`` outside
            0..2**31-1, ``scheduler_period_us`` outside -2**31..2**31-1, a
            tier's ``sm_count`` or another count or duration outside
            0..2**32-1. It is a ValueError too.
        ValueError: a ``gates``, ``rck`` or anchor value that names no mode.
        TypeError: an integer argument that is not an int (a float, a bool,
            ``None``; ``rck`` may be a bool), a tier that is neither a
            :class:`Tier` nor a tuple, ``sim`` not a :class:`SimConfig`,
            ``policy`` not a str.
    """

    def __init__(
        self,
        device: Literal["cuda", "sim"] = "cuda",
        *,
        policy: Optional[str] = None,
        tiers: Optional[Sequence[Union[Tier, Tuple[int, Union[Anchor, str]]]]] = None,
        device_ordinal: int = 0,
        max_vctx: int = 0,
        teardown_timeout_ms: int = 0,
        scheduler_period_us: int = 0,
        ls_sms: int = 0,
        idle_us: int = 0,
        be_window_us: int = 0,
        sim: Optional["SimConfig"] = None,
        gates: Union[GateMode, str, int] = GateMode.AUTO,
        rck: Union[RckMode, bool, str] = RckMode.OFF,
        gate_interval_us: int = 0,
        heartbeat_timeout_ms: int = 0,
        fault_presume_ms: Optional[int] = 0,
    ) -> None:
        self._handle: Optional[int] = None
        if device not in ("cuda", "sim"):
            raise ValueError(f"device must be 'cuda' or 'sim', not {device!r}")
        if sim is not None and device != "sim":
            raise ValueError("sim= is only for device='sim'")
        if policy is not None:
            _str("policy", policy, "Runtime")
        fn = "Runtime"
        # Every value is checked before anything is built, so a bad one
        # raises with nothing created.
        cfg = T.ds_runtime_config()
        cfg.device = T.DS_DEVICE_SIM if device == "sim" else T.DS_DEVICE_CUDA
        cfg.device_ordinal = _int("device_ordinal", device_ordinal, 0, _I32_MAX, fn)
        tier_arr = None
        if tiers is not None:
            if isinstance(tiers, (str, bytes)) or not isinstance(tiers, Sequence):
                raise TypeError(f"Runtime: tiers must be a sequence of Tier or (sm_count, anchor) tuples, "
                                f"not {type(tiers).__name__}")
            specs = []
            for i, t in enumerate(tiers):
                if not isinstance(t, Tier):
                    if isinstance(t, (str, bytes)) or not isinstance(t, Sequence) or not 1 <= len(t) <= 2:
                        raise TypeError(f"Runtime: tiers[{i}] must be a Tier or an (sm_count, anchor) tuple, "
                                        f"not {t!r}")
                    t = Tier(*t)
                specs.append((_u32(f"tiers[{i}].sm_count", t.sm_count, fn),
                              int(_enum(Anchor, t.anchor, name=f"tiers[{i}].anchor", function=fn))))
            tier_arr = (T.ds_tier_spec * max(len(specs), 1))()
            for i, (sm_count, anchor) in enumerate(specs):
                tier_arr[i].sm_count = sm_count
                tier_arr[i].anchor = anchor
            cfg.tiers = ctypes.cast(tier_arr, ctypes.POINTER(T.ds_tier_spec))
            cfg.num_tiers = _u32("len(tiers)", len(specs), fn)
        cfg.max_vctx = _u32("max_vctx", max_vctx, fn)
        cfg.teardown_timeout_ms = _u32("teardown_timeout_ms", teardown_timeout_ms, fn)
        cfg.scheduler_period_us = _i32("scheduler_period_us", scheduler_period_us, fn)
        cfg.ls_sms = _u32("ls_sms", ls_sms, fn)
        cfg.idle_us = _u32("idle_us", idle_us, fn)
        cfg.be_window_us = _u32("be_window_us", be_window_us, fn)
        cfg.gates = int(_enum(GateMode, gates, name="gates", function=fn))
        cfg.rck = int(_enum(RckMode, rck, name="rck", function=fn, bool_ok=True))
        cfg.gate_interval_us = _u32("gate_interval_us", gate_interval_us, fn)
        cfg.heartbeat_timeout_ms = _u32("heartbeat_timeout_ms", heartbeat_timeout_ms, fn)
        cfg.fault_presume_ms = (_U32_MAX if fault_presume_ms is None
                                else _u32("fault_presume_ms", fault_presume_ms, fn))
        sim_cfg = None
        if device == "sim":
            from .sim import SimConfig

            if sim is not None and not isinstance(sim, SimConfig):
                raise TypeError(f"Runtime: sim must be a SimConfig or None, not {type(sim).__name__}")
            sim_cfg = (sim or SimConfig())._to_c()
            cfg.sim = ctypes.pointer(sim_cfg)
        policy_b = policy.encode() if policy is not None else None
        cfg.policy = policy_b
        self.device: str = device
        self.device_ordinal = cfg.device_ordinal
        self._lock = threading.Lock()
        self._vctxs: Dict[int, "VCtx"] = {}
        self._registered: List[str] = []
        out = c_void_p()
        check(lib().ds_runtime_create(byref(cfg), byref(out)), "ds_runtime_create")
        self._handle = out.value
        self._sim: Optional["SimDevice"] = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def handle(self) -> int:
        """The ``ds_runtime_t`` as int. Raises InvalidHandleError once closed."""
        if self._handle is None:
            raise InvalidHandleError("the runtime was destroyed", function="Runtime")
        return self._handle

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Destroys the runtime (``ds_runtime_destroy``): its vCtxs are destroyed
        too, after their work finishes (up to the teardown timeout). Idempotent.

        Raises:
            TimeoutError: some vCtx's work was still running at the deadline
                (the runtime is destroyed anyway).
        """
        with self._lock:
            h = self._handle
            if h is None:
                return
            self._handle = None
            vctxs = list(self._vctxs.values())
            self._vctxs.clear()
        for v in vctxs:
            v._handle = None
        try:
            check(lib().ds_runtime_destroy(h), "ds_runtime_destroy")
        finally:
            for v in vctxs:  # their graphs went with them; now their memory may go
                v._detach_graphs()

    destroy = close

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is None:
            return
        warnings.warn(f"{self!r} was not closed; destroying it", ResourceWarning, stacklevel=2)
        if not sys.is_finalizing():
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"0x{self._handle:x}"
        return f"<detshare.Runtime {self.device} {state}>"

    # -- queries -----------------------------------------------------------

    def info(self) -> RuntimeInfo:
        """What the runtime runs on: device, driver, SM split and the pool."""
        ci = T.ds_runtime_info()
        check(lib().ds_runtime_info_get(self.handle, byref(ci)), "ds_runtime_info_get")
        pctx = []
        for i in range(ci.num_pctx):
            p = ci.pctx[i]
            groups = tuple(g for g in range(64) if p.group_mask >> g & 1)
            pctx.append(
                _from_struct(
                    PCtxInfo,
                    p,
                    anchor=Anchor(p.anchor),
                    groups=groups,
                    complement=None if p.complement < 0 else p.complement,
                )
            )
        return _from_struct(
            RuntimeInfo,
            ci,
            device="sim" if ci.device == T.DS_DEVICE_SIM else "cuda",
            device_name=_s(ci.device_name),
            group_sm_counts=tuple(ci.group_sm_count[: ci.num_groups]),
            pctx=tuple(pctx),
            local_cpus=_s(ci.local_cpus),
        )

    def stats(self) -> RuntimeStats:
        """Gate, RCK and watchdog figures (``ds_runtime_get_stats``; any thread)."""
        st = T.ds_runtime_stats()
        check(lib().ds_runtime_get_stats(self.handle, byref(st)), "ds_runtime_get_stats")
        return _from_struct(RuntimeStats, st, gates=GateMode(st.gates), rck_running=bool(st.rck_running))

    def probe_sms(self, pctx: int) -> FrozenSet[int]:
        """SM ids a pCtx's kernels actually ran on (``ds_pctx_probe_sms``;
        blocks about 1 ms on a GPU).

        Args:
            pctx: pool index, below ``info().pctx``'s length.

        Raises:
            InvalidArgumentError: ``pctx`` out of range (outside 0..2**32-1,
                raised by the binding, or past the pool, by the library).
            TypeError: ``pctx`` not an int.
        """
        pctx = _u32("pctx", pctx, "Runtime.probe_sms")
        bitmap = (c_uint64 * (T.DS_MAX_SMS // 64))()
        count = c_uint32()
        check(lib().ds_pctx_probe_sms(self.handle, pctx, bitmap, byref(count)), "ds_pctx_probe_sms")
        return frozenset(s for s in range(T.DS_MAX_SMS) if bitmap[s // 64] >> (s % 64) & 1)

    # -- policies ----------------------------------------------------------

    @property
    def policy(self) -> str:
        """Name of the active policy; assign a name to switch (see :meth:`set_policy`)."""
        name = c_char_p()
        check(lib().ds_runtime_get_policy(self.handle, byref(name)), "ds_runtime_get_policy")
        return _s(name.value)

    @policy.setter
    def policy(self, name: str) -> None:
        self.set_policy(name)

    def set_policy(self, name: str) -> None:
        """Makes the named policy the active one (``ds_runtime_set_policy``);
        launches that start afterwards see it.

        Raises:
            NotFoundError: no policy of that name.
            TypeError: ``name`` not a str.
        """
        name = _str("name", name, "Runtime.set_policy")
        check(lib().ds_runtime_set_policy(self.handle, name.encode()), "ds_runtime_set_policy")

    def get_policy(self) -> str:
        """Name of the active policy."""
        return self.policy

    def set_policy_param(self, policy: str, name: str, value: float | int | str) -> None:
        """Sets a registered policy's parameter (``ds_policy_param_set``),
        e.g. ``rt.set_policy_param("slo_aware", "ls_sms", 64)``; the runtime
        validates it against the parameter's range.

        Args:
            policy, name: the policy's and the parameter's names.
            value: an int, a float or the number as a str; the library parses
                it and refuses NaN, a value outside the parameter's range,
                and a fraction where the parameter is an integer.

        Raises:
            InvalidArgumentError: not a number, or outside the range.
            NotFoundError: no such policy or parameter.
            TypeError: ``policy`` or ``name`` not a str, ``value`` a bool or
                not a number or str.
        """
        fn = "Runtime.set_policy_param"
        policy, name = _str("policy", policy, fn), _str("name", name, fn)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{fn}: value must be an int, a float or a str, not {type(value).__name__}")
        check(lib().ds_policy_param_set(self.handle, policy.encode(), name.encode(), str(value).encode()),
              "ds_policy_param_set")

    def get_policy_param(self, policy: str, name: str) -> float:
        """Current value of a policy's parameter (``ds_policy_param_get``).

        Raises:
            NotFoundError: no such policy or parameter.
            TypeError: ``policy`` or ``name`` not a str.
        """
        fn = "Runtime.get_policy_param"
        policy, name = _str("policy", policy, fn), _str("name", name, fn)
        out = c_double()
        check(lib().ds_policy_param_get(self.handle, policy.encode(), name.encode(), byref(out)),
              "ds_policy_param_get")
        return out.value

    @property
    def policies(self) -> Tuple[str, ...]:
        """The built-in policies plus those registered through this object."""
        return BUILTIN_POLICIES + tuple(self._registered)

    def register_native_policy(
        self,
        name: str,
        on_launch: int,
        *,
        user_data: Optional[int] = None,
        init: Optional[int] = None,
        fini: Optional[int] = None,
        on_activate: Optional[int] = None,
        on_vctx_create: Optional[int] = None,
        on_vctx_destroy: Optional[int] = None,
        on_completion: Optional[int] = None,
        on_congestion: Optional[int] = None,
        on_tick: Optional[int] = None,
        tick_us: int = 0,
    ) -> None:
        """Registers a policy written in C (detshare/policy.h): every hook is
        the address of a function in a loaded shared object, e.g.
        ``ctypes.cast(ctypes.CDLL("libmypolicy.so").my_on_launch, ctypes.c_void_p).value``.
        Python callables cannot be hooks (``on_launch`` returns a struct by
        value, which ctypes callbacks cannot, and hooks run on the hot path).

        Args:
            name: the policy's name.
            on_launch, init, ...: function addresses as int (0..2**64-1);
                ``None`` = no hook (``on_launch`` is required).
            user_data: handed to the hooks, an address as int or ``None``.
            tick_us: period of ``on_tick``, us, 0..2**32-1.

        Raises:
            AlreadyExistsError: the name is taken. LimitError: 16 policies.
            InvalidArgumentError: empty name, no on_launch; raised by the
                binding, a hook address or ``user_data`` outside
                0..2**64-1, ``tick_us`` outside 0..2**32-1.
            TypeError: ``name`` not a str; a hook, ``user_data`` or
                ``tick_us`` not an int.
        """
        fn = "Runtime.register_native_policy"
        name = _str("name", name, fn)
        hooks = {k: _ptr(k, v, fn, none_ok=True) for k, v in (
            ("on_launch", on_launch), ("init", init), ("fini", fini), ("on_activate", on_activate),
            ("on_vctx_create", on_vctx_create), ("on_vctx_destroy", on_vctx_destroy),
            ("on_completion", on_completion), ("on_congestion", on_congestion), ("on_tick", on_tick))}
        user = _ptr("user_data", user_data, fn, none_ok=True)
        ops = T.ds_policy_ops()
        nb = name.encode()
        ops.name = nb
        for k, v in hooks.items():
            setattr(ops, k, v)
        ops.tick_us = _u32("tick_us", tick_us, fn)
        check(lib().ds_policy_register(self.handle, byref(ops), user), "ds_policy_register")
        self._registered.append(name)

    def poll(self) -> None:
        """One scheduler pass on the calling thread (``ds_runtime_poll``): for
        runtimes created with ``scheduler_period_us < 0``."""
        check(lib().ds_runtime_poll(self.handle), "ds_runtime_poll")

    # -- vCtxs -------------------------------------------------------------

    def vctx(
        self,
        name: Optional[str] = None,
        *,
        cls: Union[VCtxClass, str] = VCtxClass.BEST_EFFORT,
        priority: int = 0,
        slo_us: int = 0,
        weight: int = 1,
        phase: Union[Phase, str] = Phase.NONE,
        initial_pctx: int = -1,
        group: Optional[str] = None,
        rank: int = 0,
        ranks: int = 0,
        shared: bool = False,
    ) -> "VCtx":
        """Creates a vCtx (``ds_vctx_create``).

        With ``group``, the vCtx is rank ``rank`` of a vCtx group: the ranks
        of one job on several GPUs (tensor or data parallel), one vCtx per
        rank on each GPU's runtime, all with the same ``group`` and
        ``ranks``. Rank 0's policy places each unit (a launch, a section, a
        graph replay or segment) and every rank runs its k-th unit on the
        tier rank 0's k-th unit ran on, so the ranks must launch the same
        sequence of units; placing a rank > 0 (:meth:`VCtx.remap`, a policy)
        is accepted and ignored. Its launches wait for the other ranks up to
        the teardown timeout (TimeoutError) and raise PeerLostError at once
        when a rank they need closed its vCtx or died (:meth:`VCtx.launch`).

        Args:
            name: up to 63 bytes kept; ``None`` = ``"vctx<N>"``.
            cls: ``"be"`` / ``"best_effort"`` or ``"ls"`` / ``"latency_sensitive"``.
            priority: 0 = normal, > 0 more urgent (mapped onto stream priorities).
            priority: an int in -2**31..2**31-1 (C's ``int``).
            slo_us: latency objective per request or kernel, us (0 = none),
                0..2**32-1.
            weight: share weight, 1..2**32-1 (0 means 1).
            phase: ``"none"``, ``"prefill"`` or ``"decode"`` (for ``tpot_first``).
            initial_pctx: pool index to bind first; -1 = the whole GPU.
            group: the vCtx group's name, 1 to :data:`VCTX_GROUP_NAME_MAX`
                (47) characters of A-Z a-z 0-9 ``_`` ``-`` ``.``; ``None``
                (default): no group.
            rank: this vCtx's rank in ``group``, 0..ranks-1.
            ranks: ranks in ``group``, 2..:data:`VCTX_GROUP_MAX_RANKS` (64),
                the same on every rank; required with ``group``.
            shared: the ranks are in several processes of this host (the
                group lives in POSIX shared memory named after it) rather
                than all in this one.

        Raises:
            LimitError: ``max_vctx`` vCtxs are alive.
            InvalidArgumentError: class or pCtx index out of range; a
                ``group`` name with other characters or too long, ``ranks``
                above 64, ``rank`` >= ``ranks``, or a ``ranks`` other than
                the group's; raised by the binding (nothing created),
                ``priority``, ``slo_us``, ``weight``, ``initial_pctx``,
                ``rank`` or ``ranks`` outside the range of its C field
                (``initial_pctx``: -2**31..2**31-1; the library then checks
                it against the pool; ``rank``, ``ranks``: 0..2**32-1),
                ``ranks`` below 2 with a ``group``, a ``rank`` other than 0
                or ``ranks`` above 1 without one.
            AlreadyExistsError: ``rank`` of ``group`` has joined already
                (a rank joined twice).
            PeerLostError: a rank of an earlier group of that name left or
                died while other ranks of it remain.
            ValueError: ``cls`` or ``phase`` names no class or phase.
            TypeError: ``name`` or ``group`` neither a str nor None; an
                integer argument that is not an int (a float, a bool,
                ``None``); ``shared`` not a bool (the message names the
                argument).
        """
        return VCtx(self, name, cls=cls, priority=priority, slo_us=slo_us, weight=weight,
                    phase=phase, initial_pctx=initial_pctx, group=group, rank=rank, ranks=ranks,
                    shared=shared)

    create_vctx = vctx

    @property
    def vctxs(self) -> Tuple["VCtx", ...]:
        """Live vCtxs created through this object."""
        with self._lock:
            return tuple(self._vctxs.values())

    def _forget(self, v: "VCtx") -> None:
        with self._lock:
            self._vctxs.pop(id(v), None)

    # -- simulated device ----------------------------------------------------

    @property
    def sim(self) -> "SimDevice":
        """The simulated device's helpers (kernels, trace, virtual time).

        Raises:
            NotSupportedError: the runtime drives a CUDA device.
        """
        if self._sim is None:
            from .sim import SimDevice

            self._sim = SimDevice(self)
        return self._sim


class VCtx:
    """A virtual context: what a tenant holds (program order, class, SLO,
    statistics), moved between pCtxs at kernel boundaries. Create it with
    :meth:`Runtime.vctx`; use it as a context manager or call :meth:`close`."""

    def __init__(
        self,
        runtime: Runtime,
        name: Optional[str],
        *,
        cls: Union[VCtxClass, str],
        priority: int,
        slo_us: int,
        weight: int,
        phase: Union[Phase, str],
        initial_pctx: int,
        group: Optional[str] = None,
        rank: int = 0,
        ranks: int = 0,
        shared: bool = False,
    ) -> None:
        self._handle: Optional[int] = None
        fn = "Runtime.vctx"
        # Checked before anything is stored: C's uint32_t would keep
        # 2**32 + 100 as 100 while the attribute said otherwise.
        if name is not None:
            _str("name", name, fn)
        if group is not None:
            _str("group", group, fn)
        vcls: VCtxClass = _enum(VCtxClass, cls, _CLASS_NAMES, name="cls", function=fn)
        vphase: Phase = _enum(Phase, phase, name="phase", function=fn)
        a = T.ds_vctx_attr()
        a.priority = _i32("priority", priority, fn)
        a.slo_us = _u32("slo_us", slo_us, fn)
        a.weight = _u32("weight", weight, fn)
        a.initial_pctx = _i32("initial_pctx", initial_pctx, fn)
        grank = _u32("rank", rank, fn)
        granks = _u32("ranks", ranks, fn)
        if not isinstance(shared, bool):
            raise TypeError(f"{fn}: shared must be a bool, not {type(shared).__name__}")
        if group is not None and granks < 2:
            raise InvalidArgumentError(
                f"ranks must be 2..{T.DS_VCTX_GROUP_MAX_RANKS} with group {group!r}, not {ranks!r}", function=fn)
        if group is None and (grank != 0 or granks > 1):
            # a rank > 0 outside a group would run unsynchronised: refused
            # rather than ignored as the C attribute is
            raise InvalidArgumentError(f"rank {grank} of {granks} ranks given without a group", function=fn)
        # the name's bytes stay alive (gb) until ds_vctx_create has copied them
        gb = group.encode() if group is not None else None
        a.group = gb
        a.group_rank = grank
        a.group_ranks = granks if group is not None else 0
        a.group_flags = T.DS_VCTX_GROUP_SHARED if (shared and group is not None) else 0
        self.runtime = runtime
        self.cls = vcls
        self.priority: int = a.priority
        self.slo_us: int = a.slo_us
        self.weight: int = a.weight or 1  # as the library reads it
        self.phase = vphase
        self._group: Optional[str] = group
        self._rank: int = grank if group is not None else 0
        self._ranks: int = granks if group is not None else 0
        self._shared: bool = bool(shared and group is not None)
        nb = name.encode() if name is not None else None
        a.name = nb
        a.cls = int(self.cls)
        a.phase = int(self.phase)
        out = c_void_p()
        check(lib().ds_vctx_create(runtime.handle, byref(a), byref(out)), "ds_vctx_create")
        self._handle = out.value
        nm = c_char_p()
        check(lib().ds_vctx_get_name(self._handle, byref(nm)), "ds_vctx_get_name")
        self.name: str = _s(nm.value)
        self._streams: Dict[int, Any] = {}
        self._graphs: Dict[int, "Graph"] = {}
        with runtime._lock:
            runtime._vctxs[id(self)] = self

    @property
    def group(self) -> Optional[str]:
        """Name of the vCtx group this vCtx is a rank of; ``None`` outside one
        (see :meth:`Runtime.vctx`)."""
        return self._group

    @property
    def rank(self) -> int:
        """This vCtx's rank in its group (0: the rank whose policy decides);
        0 outside a group."""
        return self._rank

    @property
    def ranks(self) -> int:
        """Ranks in its group; 0 outside a group."""
        return self._ranks

    @property
    def shared(self) -> bool:
        """Its group spans processes of this host (POSIX shared memory)."""
        return self._shared

    @property
    def handle(self) -> int:
        """The ``ds_vctx_t`` as int. Raises InvalidHandleError once destroyed."""
        h = self._handle
        if h is None:
            raise InvalidHandleError(f"vCtx '{self.name}' was destroyed", function="VCtx")
        return h

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Destroys the vCtx (``ds_vctx_destroy``) after its work finishes (up to
        the runtime's teardown timeout); an open section is closed, and its
        graphs are destroyed too (their :class:`Graph` objects read as
        closed). Idempotent.

        Raises:
            TimeoutError: work still running at the deadline (destroyed anyway).
        """
        h = self._handle
        if h is None:
            return
        self._handle = None
        self._streams.clear()
        self.runtime._forget(self)
        try:
            check(lib().ds_vctx_destroy(h), "ds_vctx_destroy")
        finally:
            self._detach_graphs()  # the library destroyed them after the vCtx's work

    def _detach_graphs(self) -> None:
        graphs = list(self._graphs.values())
        self._graphs.clear()
        for g in graphs:
            g._detach()

    destroy = close

    def __enter__(self) -> "VCtx":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "destroyed" if self._handle is None else f"0x{self._handle:x}"
        return f"<detshare.VCtx '{self.name}' {self.cls.name.lower()} {state}>"

    # -- work --------------------------------------------------------------

    def launch(
        self,
        function: Any,
        grid: Dim,
        block: Dim,
        params: Optional[Sequence[Any]] = None,
        *,
        shared_mem_bytes: int = 0,
        expected_us: int = 0,
        phase: Optional[Union[Phase, str]] = None,
    ) -> None:
        """Launches a kernel on the vCtx's current stream (``ds_launch``),
        exactly as given: nothing is sliced, padded or reordered.

        Args:
            function: a ``CUfunction`` as int (e.g. CuPy's
                ``RawKernel.kernel.ptr``, ``cuModuleGetFunction`` via
                cuda-python, :class:`detshare.sim.SimKernel`), loaded in the
                device's primary context.
            grid, block: ``n`` or ``(x[, y[, z]])``, each >= 1.
            params: the kernel's parameters as ctypes objects, in order
                (``[ctypes.c_void_p(ptr), ctypes.c_int(n)]``); their bytes are
                what the kernel receives. ``None`` = no parameters.
            shared_mem_bytes: dynamic shared memory, bytes, 0..2**32-1.
            expected_us: hint, the caller's estimate of the duration, us,
                0..2**32-1.
            phase: hint, ``"prefill"`` / ``"decode"`` for this kernel.

        Raises:
            InvalidLaunchError: zero or oversized dimensions.
            InvalidArgumentError: ``function`` is 0 (NULL); raised by the
                binding (nothing launched), a dimension,
                ``shared_mem_bytes`` or ``expected_us`` outside 0..2**32-1,
                ``function`` outside 0..2**64-1.
            ValueError: ``grid`` or ``block`` with more than 3 dimensions,
                ``phase`` naming no phase.
            TypeError: ``function``, ``grid``, ``block``, ``params`` (or a
                parameter), ``shared_mem_bytes`` or ``expected_us`` of the
                wrong type, e.g. ``None`` for ``function`` (the message
                names the argument).
            DriverError: the driver refused (detail in the message).
            TimeoutError: held by the policy or its gate past the teardown
                timeout; in a vCtx group, another rank kept this launch
                waiting that long (rank 0 not deciding it, a rank > 0 more
                than 256 units behind; the message names the rank).
            PeerLostError: in a vCtx group, a rank this launch needs closed
                its vCtx or its process died (the message names the group
                and the rank); raised at once.
        """
        fn = "VCtx.launch"
        f = _handle(function, "function", fn)
        g = _dim3(grid, "grid", fn)
        b = _dim3(block, "block", fn)
        smem = _u32("shared_mem_bytes", shared_mem_bytes, fn)
        exp = _u32("expected_us", expected_us, fn)
        ph = _enum(Phase, phase, name="phase", function=fn) if phase is not None else None
        arr = _param_array(params, fn)
        hints = None
        if exp or ph is not None:
            hints = T.ds_launch_hints()
            hints.expected_us = exp
            hints.phase = int(ph) if ph is not None else int(Phase.NONE)
            hints = byref(hints)
        check(lib().ds_launch(self.handle, f, g, b, smem, arr, hints), "ds_launch")

    def acquire_stream(self) -> int:
        """Opens a section and returns the vCtx's current stream as int
        (``ds_vctx_acquire_stream``). Prefer :meth:`section`.

        Raises:
            BusyError: a section is already open.
            TimeoutError, PeerLostError: in a vCtx group, as for
                :meth:`launch` (a section is one unit of the group).
        """
        s = c_void_p()
        check(lib().ds_vctx_acquire_stream(self.handle, byref(s)), "ds_vctx_acquire_stream")
        return s.value or 0

    def release_stream(self) -> None:
        """Closes the open section (``ds_vctx_release_stream``).

        Raises:
            BusyError: no section is open.
        """
        check(lib().ds_vctx_release_stream(self.handle), "ds_vctx_release_stream")

    @contextmanager
    def section(self, stream: StreamKind = "auto") -> Iterator[Any]:
        """A section: work on the yielded stream is ordered with the vCtx's
        launches and is one unit for accounting and remapping (no remap happens
        inside it)::

            with vctx.section() as s, torch.cuda.stream(s):
                y = model(x)

        Args:
            stream: what to yield. ``"torch"``: a ``torch.cuda.ExternalStream``
                over the vCtx's stream (imports torch). ``"raw"``: the
                ``CUstream`` as int. ``"auto"`` (default): ``"torch"`` when the
                runtime drives a CUDA device and the program has already
                imported torch, else ``"raw"`` (torch is never imported here
                unless asked for).
        """
        s = self.acquire_stream()
        try:
            yield self._wrap_stream(s, stream)
        finally:
            self.release_stream()

    def _wrap_stream(self, s: int, kind: StreamKind) -> Any:
        if kind not in ("auto", "torch", "raw"):
            raise ValueError(f"stream must be 'auto', 'torch' or 'raw', not {kind!r}")
        if kind == "raw" or (kind == "auto" and (self.runtime.device != "cuda" or "torch" not in sys.modules)):
            return s
        if self.runtime.device != "cuda":
            raise ValueError("a torch stream needs a runtime on a CUDA device, not the simulated one")
        ext = self._streams.get(s)
        if ext is None:
            import torch

            ext = torch.cuda.ExternalStream(s, device=torch.device("cuda", self.runtime.device_ordinal))
            self._streams[s] = ext
        return ext

    def remap(self, pctx: int) -> None:
        """Moves the vCtx to pool index ``pctx`` at its next kernel boundary
        (``ds_vctx_remap``; any thread). Program order is kept.

        Raises:
            InvalidArgumentError: index out of range (past the pool, from
                the library; outside 0..2**32-1, from the binding).
            TypeError: ``pctx`` not an int.
        """
        pctx = _u32("pctx", pctx, "VCtx.remap")
        check(lib().ds_vctx_remap(self.handle, pctx), "ds_vctx_remap")

    @property
    def pctx(self) -> int:
        """Pool index the vCtx is bound to now."""
        out = c_uint32()
        check(lib().ds_vctx_get_pctx(self.handle, byref(out)), "ds_vctx_get_pctx")
        return out.value

    def synchronize(self) -> None:
        """Waits for all of the vCtx's work (``ds_vctx_synchronize``).

        Raises:
            DriverError: a kernel failed.
        """
        check(lib().ds_vctx_synchronize(self.handle), "ds_vctx_synchronize")

    def stats(self) -> VCtxStats:
        """Counters (``ds_vctx_get_stats``; any thread, may lag by a launch)."""
        st = T.ds_vctx_stats()
        check(lib().ds_vctx_get_stats(self.handle, byref(st)), "ds_vctx_get_stats")
        return _from_struct(
            VCtxStats,
            st,
            urgent=bool(st.urgent),
            gate_interval_us=None if st.gate_interval_us == GATES_NONE else st.gate_interval_us,
            gate_closed=bool(st.gate_closed),
        )

    # -- request latency accounting -------------------------------------------
    #
    # A request is what the application answers one of its clients with (a
    # decode step, a batch, an RPC). The runtime keeps per vCtx the totals,
    # the count over its slo_us and the last REQUEST_WINDOW latencies' p50 and
    # p99 (VCtxStats.request_*; the policy view, which slo_aware sizes an LS
    # tier from). Latencies are us on the runtime's clock: the simulated clock
    # on the simulated device. Nothing here touches the GPU or the launch path.

    def request_begin(self) -> int:
        """Marks the beginning of one request of this vCtx
        (``ds_vctx_request_begin``): reads the runtime's clock once.

        Returns:
            the request's start, an opaque nonzero int to hand to
            :meth:`request_end` of this vCtx.

        Raises:
            InvalidHandleError: the vCtx (or its runtime) was closed.

        Any thread, lock-free; requests may overlap (begin several, end them
        in any order, on any thread).
        """
        req = c_uint64()
        check(lib().ds_vctx_request_begin(self.handle, byref(req)), "ds_vctx_request_begin")
        return req.value

    def request_end(self, req: int) -> float:
        """Marks the end of a request begun by :meth:`request_begin`
        (``ds_vctx_request_end``): its latency, now minus its start, joins
        the vCtx's accounting (:meth:`stats`).

        Args:
            req: what :meth:`request_begin` returned. Ending it twice records
                it twice.

        Returns:
            its latency, us (float, >= 0).

        Raises:
            InvalidArgumentError: ``req`` is 0, negative, wider than 64 bits
                or later than now: not a request begun on this runtime
                (nothing is recorded).
            TypeError: ``req`` is not an int (a bool, a float, ``None``).
            InvalidHandleError: the vCtx (or its runtime) was closed.

        Any thread: the writers of one vCtx serialise for one insertion into
        its sorted window (well under a microsecond); readers never wait.
        """
        if isinstance(req, bool) or not hasattr(type(req), "__index__"):
            raise TypeError(f"VCtx.request_end: req must be an int from request_begin, not {type(req).__name__}")
        r = operator.index(req)
        if not 0 <= r <= _U64_MAX:
            raise InvalidArgumentError(f"req must be in 0..{_U64_MAX}, not {req!r}: not a request begun by "
                                       "request_begin", function="VCtx.request_end")
        out = c_double()
        check(lib().ds_vctx_request_end(self.handle, r, byref(out)), "ds_vctx_request_end")
        return out.value

    def request_record(self, latency_us: float) -> None:
        """Records one request of this vCtx whose latency the application
        measured itself, e.g. from the request's arrival in its own queue
        (``ds_vctx_request_record``).

        Args:
            latency_us: its latency, us: a finite number in 0..1e12 (an int
                or a float).

        Raises:
            InvalidArgumentError: negative, above 1e12, NaN or infinite
                (nothing is recorded).
            TypeError: not a number (a bool, a str, ``None``).
            InvalidHandleError: the vCtx (or its runtime) was closed.

        Any thread, as :meth:`request_end`.
        """
        v = _real("latency_us", latency_us, "VCtx.request_record")  # the library checks the value
        check(lib().ds_vctx_request_record(self.handle, v), "ds_vctx_request_record")

    @contextmanager
    def request(self) -> Iterator[Request]:
        """One request around the ``with`` block: :meth:`request_begin` on
        entry, :meth:`request_end` on exit, also when the block raises (the
        request is recorded, and the block's exception propagates unchanged)::

            with ls.request() as r:
                logits = g.replay(); ls.synchronize()
            print(r.latency_us, ls.stats().request_p99_us)

        Time the work itself, not just its submission: synchronize (or wait
        for the result) inside the block.

        Yields:
            a :class:`Request`, whose ``latency_us`` (us) is set on exit.

        Raises:
            InvalidHandleError: the vCtx was closed before the block (on
                entry), or by another thread while the request was ending
                (on exit, unless the block raised: its exception wins). A
                vCtx or runtime closed inside the block ends nothing and
                raises nothing (``latency_us`` stays ``None``).

        Any thread; blocks on one vCtx may overlap and nest.
        """
        r = Request(self, self.request_begin())
        try:
            yield r
        except BaseException:
            if self._handle is not None:
                try:
                    r.latency_us = self.request_end(r.start)
                except DetShareError:
                    pass  # the block's exception is the one to see
            raise
        if self._handle is not None:  # closing the vCtx inside the block dropped the request
            r.latency_us = self.request_end(r.start)

    def set_urgent(self, urgent: bool) -> None:
        """Runs the next work on the highest-priority stream (policy action)."""
        check(lib().ds_vctx_set_urgent(self.handle, int(bool(urgent))), "ds_vctx_set_urgent")

    def set_window(self, window_us: int) -> None:
        """Bounds predicted work in flight to ``window_us`` us (0 = unbounded).

        Args:
            window_us: 0..2**32-1.

        Raises:
            InvalidArgumentError: ``window_us`` outside 0..2**32-1 (nothing
                changed).
            TypeError: ``window_us`` not an int.
        """
        window_us = _u32("window_us", window_us, "VCtx.set_window")
        check(lib().ds_vctx_set_window(self.handle, window_us), "ds_vctx_set_window")

    # -- graphs --------------------------------------------------------------
    #
    # A CUDA graph runs in the context its kernels were captured in, whatever
    # stream launches it, so a graph captured once would keep its pCtx's SMs
    # after a remap. A Graph holds one instantiation per pCtx instead, each
    # captured on a stream of that pCtx, and a replay launches the one of the
    # pCtx the vCtx is bound to (include/detshare/detshare.h, ds_graph_group).

    def graph(
        self,
        fn: Callable[[], Any],
        *,
        pctxs: Optional[Sequence[int]] = None,
        eager: bool = True,
        warmup: int = 1,
        name: Optional[str] = None,
        pool: Any = None,
        segment_us: int = 0,
    ) -> "Graph":
        """Captures a PyTorch step as a graph of this vCtx, once per pCtx
        (``ds_graph_create``)::

            tokens = torch.zeros(8, dtype=torch.long, device="cuda")   # static inputs
            g = vctx.graph(lambda: model(tokens))                      # captured on every pCtx
            tokens.copy_(next_tokens)
            logits = g.replay()                                        # g.outputs, the same tensor each time

        ``fn`` takes no arguments and works on static tensors allocated
        before (as for ``torch.cuda.graph``): every replay reads the inputs'
        current contents and writes the same output tensors. It may return
        a tensor, a tuple or list of tensors, or ``None``. It runs:

        - ``warmup`` times eagerly in a section of this vCtx (lazy
          initialisation, cuBLAS workspaces), then the vCtx is synchronized;
        - then once per pCtx of the graph (all of them now with
          ``eager=True``, else each at the first :meth:`Graph.replay` bound
          there), on a ``torch.cuda.ExternalStream`` over a stream of that
          pCtx that the runtime is capturing, made current with
          ``torch.cuda.stream``. Every allocation of the captures comes from
          one ``torch.cuda.MemPool``, the graph's own or ``pool``; the
          instantiations never run at once (the vCtx's program order), so
          they may share buffers.

        At the first capture the binding allocates one static output tensor
        per returned tensor (``torch.empty_like``, in the graph's pool) and
        every capture ends with a copy of ``fn``'s outputs into them, so
        :attr:`Graph.outputs` are the same tensors whichever pCtx ran. Every
        capture must return tensors of the same shapes and dtypes.

        A step can be launched as several units the policy can move between
        (remap, gate or window inside the step): call :func:`graph_cut` in
        ``fn`` where one piece ends and the next begins (every stream forked
        from the current one joined back first), and/or give ``segment_us``:
        the first replay then measures the step and cuts its pieces further
        wherever the DAG narrows to one node, into segments of at most about
        ``segment_us`` each on the largest pCtx of the set
        (:attr:`GraphStats.segments`, :meth:`Graph.segments`). The output
        copy into the static outputs runs after ``fn``, so it is captured in
        the last piece. Segments are the captured kernels and launch
        configurations, so the output's bits do not change.

        ``fn`` must enqueue the same kernels with the same launch
        configurations on every pCtx (the library checks), only on the
        current stream (or streams forked from it and joined back), and must
        not synchronize, read values back to the host (``.item()``,
        ``.cpu()``), use CUDA random numbers (torch's generator refuses
        captures it did not begin), or call this vCtx's methods.

        Args:
            fn: the step, ``fn() -> Tensor | Sequence[Tensor] | None``.
            pctxs: pool indices the graph may run on; ``None`` = every pCtx.
                A replay while the vCtx is bound elsewhere raises
                :class:`~detshare.errors.NotFoundError`.
            eager: capture every pCtx now (default) rather than at the first
                replay on each; lazy captures run ``fn`` inside
                :meth:`Graph.replay`.
            warmup: eager runs of ``fn`` before capturing (>= 0).
            name: for logs and errors (``None`` = ``"graph"``).
            pool: a ``torch.cuda.MemPool`` to capture into, shared with other
                graphs of this vCtx (as SGLang's CUDA graph runner shares one
                pool across its batch sizes: capture the largest first, and
                the smaller ones reuse its freed blocks); ``None`` = a pool
                of the graph's own. Every graph keeps the pool alive. Share
                a pool only between graphs of one vCtx: they never run at
                once (its program order), graphs of different vCtxs may.
            segment_us: automatic cuts: the bound on a segment's measured
                duration on the largest pCtx of the set, us; 0 (default) =
                none, one segment per piece; else
                :data:`GRAPH_SEGMENT_MIN_US` (100) to
                :data:`GRAPH_SEGMENT_MAX_US` (10 s). Why no cut was made, if
                none was: :attr:`GraphStats.uncut`.

        Returns:
            the :class:`Graph`, owned by this vCtx.

        Raises:
            CaptureError: a capture failed (the library's check, an
                invalidated capture, no work captured), or ``fn`` raised:
                then ``fn``'s exception itself is raised, chained to the
                :class:`~detshare.errors.CaptureError` (``__cause__``).
                Nothing is kept from a failed call.
            BusyError: ``warmup`` > 0 while a section of this vCtx is open
                (the warm-up runs in a section of its own).
            InvalidArgumentError: a pCtx index out of range, repeated, or an
                empty ``pctxs``; raised by the binding before ``fn`` runs,
                ``warmup < 0``, ``segment_us`` out of range, a ``pctxs``
                entry outside 0..2**32-1 (a ValueError too).
            NotSupportedError: the driver has no graph API.
            ValueError: the runtime is on the simulated device (use
                :meth:`graph_raw`), ``pool`` not a ``torch.cuda.MemPool``;
                or, re-raised as above, captures returned differently
                shaped outputs.
            TypeError: ``fn`` returned something other than tensors;
                ``warmup``, ``segment_us`` or a ``pctxs`` entry not an int,
                ``pctxs`` not a sequence, ``name`` not a str.

        Owner thread. Blocks for the captures and instantiations (about a
        millisecond per pCtx per hundred kernels; :meth:`Graph.stats`).
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        warmup = _int("warmup", warmup, 0, None, "VCtx.graph")
        name, pctxs, segment_us = _graph_args(name, pctxs, segment_us, "VCtx.graph")
        if self.runtime.device != "cuda":
            raise ValueError("VCtx.graph captures PyTorch work and needs a runtime on a CUDA device; on the "
                             "simulated device use VCtx.graph_raw")
        import torch

        if pool is not None and not isinstance(pool, torch.cuda.MemPool):
            raise ValueError(f"pool must be a torch.cuda.MemPool, not {type(pool).__name__}")
        dev = torch.device("cuda", self.runtime.device_ordinal)
        if warmup:
            with self.section("torch") as s, torch.cuda.stream(s):
                for _ in range(warmup):
                    fn()
            self.synchronize()
        g = Graph(self, name, pctxs, eager, segment_us)
        # The graph's memory pool lives in g._keep only, not in a local or a
        # closure: a frame kept by an exception's traceback would keep it past
        # close(), until a garbage collection that may come during another
        # capture, where torch refuses to free a pool (captures_underway).
        g._keep.append(pool if pool is not None else torch.cuda.MemPool())

        # cuBLAS keeps a workspace per (handle, stream) for good. Cleared before
        # a capture, the capture allocates its own in the pool (as
        # torch._inductor's CUDA graph trees do), so no instantiation uses a
        # workspace outside the graph's memory; cleared after it, no entry
        # outlives the capture under the capture stream's address (the vCtx's
        # capture stream of the pCtx, kept until the vCtx is destroyed, after
        # which a new stream could get that address). Freed, the workspace
        # stays in the pool.
        clear_ws = getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)

        def capture(stream: int) -> None:
            clear_ws()
            try:
                with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=dev)), \
                        torch.cuda.use_mem_pool(g._keep[0], device=dev):
                    capture_outputs()
            finally:
                clear_ws()

        def capture_outputs() -> None:
            flat, single = _output_tensors(fn(), g.name)
            first = not g._have_static
            if first:  # the static outputs, in the pool
                static = None if flat is None else tuple(torch.empty_like(t) for t in flat)
            else:
                static = g._static
                _check_same_outputs(g.name, static, flat)
            for dst, src in zip(static or (), flat or ()):
                dst.copy_(src)  # captured: every instantiation ends writing the same tensors
            del flat  # fn's own outputs go back to the pool inside the capture
            if first:
                g._static, g._have_static = static, True
                g.outputs = None if static is None else (static[0] if single else static)

        g._create(capture)
        return g

    def graph_raw(
        self,
        capture_fn: Callable[[int], Optional[int]],
        *,
        pctxs: Optional[Sequence[int]] = None,
        eager: bool = True,
        name: Optional[str] = None,
        segment_us: int = 0,
    ) -> "Graph":
        """Makes a graph of this vCtx from a capture function of your own
        (``ds_graph_create``), without PyTorch; on the simulated device too::

            k = rt.sim.kernel("step", 10.0)
            g = vctx.graph_raw(lambda s: rt.sim.launch_on_stream(s, k, 132, 128))
            g.replay()

        ``capture_fn(stream)`` is called once per pCtx of the graph (all now
        with ``eager=True``, else each at the first replay bound there) with
        the capturing ``CUstream`` as int, in that pCtx's green context,
        which is current on the calling thread during the call. It enqueues
        one step's work on that stream (a CuPy ``RawKernel`` on a
        ``cupy.cuda.ExternalStream``, ``cuLaunchKernel`` through
        cuda-python, :meth:`SimDevice.launch_on_stream`); the same kernels
        with the same launch configurations every time (checked), on that
        stream or streams forked from it and joined back; without
        synchronizing, allocating with ``cuMemAlloc`` or calling this vCtx's
        methods. Kernel parameters are captured by value: every
        instantiation shares the buffers they point to. ``capture_fn`` may
        cut the step into pieces with :func:`graph_cut` (``graph_cut()`` or
        ``graph_cut(stream)``), as in :meth:`graph`.

        Args:
            capture_fn: ``capture_fn(stream: int) -> None | int``; a nonzero
                int fails the capture (:class:`~detshare.errors.CaptureError`),
                as does an exception (re-raised chained to the CaptureError).
            pctxs, eager, name, segment_us: as for :meth:`graph`.

        Returns:
            the :class:`Graph` (``outputs`` is ``None``).

        Raises:
            as :meth:`graph`, less the errors of ``fn``, ``warmup`` and
            ``pool``; TypeError if ``capture_fn`` is not callable.

        Owner thread.
        """
        if not callable(capture_fn):
            raise TypeError(f"capture_fn must be callable, not {type(capture_fn).__name__}")
        name, pctxs, segment_us = _graph_args(name, pctxs, segment_us, "VCtx.graph_raw")
        g = Graph(self, name, pctxs, eager, segment_us)
        g._create(capture_fn)
        return g

    def graph_from_cuda_graph(
        self,
        graph: Any,
        *,
        pctxs: Optional[Sequence[int]] = None,
        name: Optional[str] = None,
        outputs: Any = None,
        segment_us: int = 0,
    ) -> "Graph":
        """Makes a graph of this vCtx from a CUDA graph the application
        captured (``ds_graph_from_cuda_graph``), one instantiation per pCtx,
        all made now::

            tg = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(tg):
                y = model(x)
            g = vctx.graph_from_cuda_graph(tg, outputs=y)
            g.replay()                                   # follows the vCtx; returns y

        The library points every kernel node at each pCtx's context through
        its ``CUkernel`` and instantiates it there, then restores the nodes:
        the graph is only read. Kernels loaded with ``cuModuleGetFunction``
        (no ``CUkernel``: CuPy's ``RawKernel``, for one), child graphs and
        conditional nodes cannot be moved; capture such work with
        :meth:`graph_raw` instead.

        Args:
            graph: a ``torch.cuda.CUDAGraph`` made with ``keep_graph=True``
                and captured (its ``raw_cuda_graph()`` is used, and the
                object is kept alive as long as this graph: its memory pool
                holds the buffers the kernels use), or a ``CUgraph`` handle as
                int (the caller keeps its buffers alive as long as the
                returned graph).
            pctxs, name, segment_us: as for :meth:`graph`.
            outputs: returned by :meth:`Graph.replay` and kept as
                :attr:`Graph.outputs` (e.g. the tensors the torch capture
                produced); ``None`` by default.

        Raises:
            NotSupportedError: a kernel node without ``CUkernel``, a node of a
                type that cannot be moved, or no graph API in the driver.
            InvalidArgumentError: the graph is NULL or has no node; a pCtx
                index out of range or repeated; raised by the binding,
                ``segment_us`` out of range, ``graph`` or a ``pctxs`` entry
                outside 0..2**64-1 / 0..2**32-1.
            CaptureError: instantiations differ between pCtxs.
            TypeError: ``graph`` is neither an int nor has ``raw_cuda_graph``;
                ``segment_us`` or a ``pctxs`` entry not an int, ``name`` not
                a str.

        Owner thread; do not use ``graph`` from another thread meanwhile.
        """
        name, pctxs, segment_us = _graph_args(name, pctxs, segment_us, "VCtx.graph_from_cuda_graph")
        raw, keep = _raw_cuda_graph(graph, "graph", "VCtx.graph_from_cuda_graph")
        g = Graph(self, name, pctxs, True, segment_us)
        if keep is not None:
            g._keep.append(keep)
        g.outputs = outputs
        attr, _arr = g._attr()
        out = c_void_p()
        check(lib().ds_graph_from_cuda_graph(self.handle, c_void_p(raw), byref(attr), byref(out)),
              "ds_graph_from_cuda_graph")
        g._adopt(out.value)
        return g

    def graph_from_cuda_graphs(
        self,
        graphs: Sequence[Any],
        *,
        pctxs: Optional[Sequence[int]] = None,
        name: Optional[str] = None,
        outputs: Any = None,
        segment_us: int = 0,
    ) -> "Graph":
        """Makes one graph of this vCtx from CUDA graphs that together form
        one step, each a piece launched in order (``ds_graph_from_cuda_graphs``):
        a piecewise CUDA graph (SGLang's piecewise runner, vLLM's piecewise
        backend, PyTorch's ``CUDAGraphSequence``)::

            pieces = []
            for layer_block in blocks:                   # static tensors throughout
                tg = torch.cuda.CUDAGraph(keep_graph=True)
                with torch.cuda.graph(tg, pool=mempool):
                    h = layer_block(h)
                pieces.append(tg)
            g = vctx.graph_from_cuda_graphs(pieces, outputs=h, segment_us=2000)
            g.replay()                                   # one unit per segment, in order

        Each piece is handled as by :meth:`graph_from_cuda_graph` (its kernel
        nodes re-bound per pCtx through their ``CUkernel``, the caller's
        graphs left as they were); every piece starts a segment, and with
        ``segment_us`` pieces are cut further at the first replay.

        Args:
            graphs: the pieces in launch order, 1 to
                :data:`GRAPH_MAX_SEGMENTS`: each a ``torch.cuda.CUDAGraph``
                made with ``keep_graph=True`` and captured (kept alive as long
                as this graph), or a ``CUgraph`` handle as int (the caller
                keeps its buffers alive as long as the returned graph).
            pctxs, name, outputs, segment_us: as for
                :meth:`graph_from_cuda_graph`.

        Raises:
            InvalidArgumentError: no graphs, more than
                :data:`GRAPH_MAX_SEGMENTS`, a NULL graph or one without
                nodes; a pCtx index out of range or repeated; raised by the
                binding, ``segment_us`` out of range, an int entry of
                ``graphs`` outside 0..2**64-1, a ``pctxs`` entry outside
                0..2**32-1.
            NotSupportedError, CaptureError: as :meth:`graph_from_cuda_graph`.
            TypeError: ``graphs`` not a sequence, an entry neither an int nor
                with ``raw_cuda_graph``; ``segment_us`` or a ``pctxs`` entry
                not an int, ``name`` not a str.

        Owner thread; do not use the graphs from another thread meanwhile.
        """
        name, pctxs, segment_us = _graph_args(name, pctxs, segment_us, "VCtx.graph_from_cuda_graphs")
        if isinstance(graphs, (str, bytes)) or not isinstance(graphs, Sequence):
            raise TypeError(f"VCtx.graph_from_cuda_graphs: graphs must be a sequence of torch.cuda.CUDAGraph "
                            f"or CUgraph ints, "
                            f"not {type(graphs).__name__}")
        raws: List[int] = []
        keeps: List[Any] = []
        for i, gr in enumerate(graphs):
            raw, keep = _raw_cuda_graph(gr, f"graphs[{i}]", "VCtx.graph_from_cuda_graphs")
            raws.append(raw)
            if keep is not None:
                keeps.append(keep)
        g = Graph(self, name, pctxs, True, segment_us)
        g._keep.extend(keeps)
        g.outputs = outputs
        attr, _arr = g._attr()
        arr = (T.CUgraph * max(len(raws), 1))(*raws)
        out = c_void_p()
        check(lib().ds_graph_from_cuda_graphs(self.handle, arr, len(raws), byref(attr), byref(out)),
              "ds_graph_from_cuda_graphs")
        g._adopt(out.value)
        return g

    def launch_graph(self, graph: "Graph") -> Any:
        """Launches ``graph`` on this vCtx (``ds_graph_launch``): what
        :meth:`Graph.replay` does on the graph's own vCtx. A graph runs only
        on the vCtx that made it; any other raises
        :class:`~detshare.errors.InvalidArgumentError`.
        """
        return graph._launch_on(self)

    @property
    def graphs(self) -> Tuple["Graph", ...]:
        """Live graphs of this vCtx made through this object."""
        return tuple(self._graphs.values())

    # -- gates ---------------------------------------------------------------
    #
    # A gate is a stream wait on the vCtx's control word, placed before a
    # kernel or section. Closing it stops the vCtx's already-queued work at
    # its next gate, on the device; opening resumes it in program order
    # (nothing dropped or run twice). A running kernel is never interrupted.

    def set_gate_interval(self, interval_us: Optional[int]) -> None:
        """Places gates in the vCtx's stream: before a kernel or section once
        ``interval_us`` of predicted work was submitted since its last gate
        (``ds_vctx_set_gate_interval``; any thread). Takes effect at its next
        launch; each gate costs one stream operation (about 1 us of host time,
        two with ``gates="rck"``). The ``slo_aware`` policy sets the interval
        of its BE vCtxs itself (``Runtime(gate_interval_us=...)``).

        Args:
            interval_us: predicted work between gates, us; 0 = a gate before
                every kernel and section; ``None`` (or :data:`GATES_NONE`) =
                no gates, the default.

        Raises:
            NotSupportedError: the runtime's gates are off (any interval but
                ``None``).
            InvalidArgumentError: an interval outside 0..2**32-1 (a
                ValueError too; nothing changed).
            TypeError: an interval that is not an int (a float, a bool).
        """
        v = GATES_NONE if interval_us is None else _u32("interval_us", interval_us, "VCtx.set_gate_interval")
        check(lib().ds_vctx_set_gate_interval(self.handle, v), "ds_vctx_set_gate_interval")

    def gate_close(self) -> None:
        """Closes the vCtx's gate (``ds_vctx_gate_close``; any thread, never
        blocks). Its queued work stops entering the GPU at its next gate, and
        its owner thread's next :meth:`launch` or :meth:`section` waits until
        the gate opens, so call it from another thread (a scheduler) or open
        the gate before the owner launches again. Closing a closed gate does
        nothing. A gate closed longer than the runtime's teardown timeout is
        reopened by the runtime (``RuntimeStats.gate_expiries``); closing the
        vCtx or the runtime opens it first. The ``slo_aware`` policy (the
        default) owns its BE vCtxs' gates and reopens them once LS is idle:
        close gates by hand under ``"manual"`` or a policy of your own.

        Raises:
            NotSupportedError: the runtime's gates are off.
            LimitError: the hardware-queue budget is spent
                (``RuntimeStats.max_closed_gates`` gates are closed, a
                closed gate blocks one ``CUDA_DEVICE_MAX_CONNECTIONS``
                queue): the gate stays open. Set
                ``CUDA_DEVICE_MAX_CONNECTIONS`` higher (up to 32) in the
                environment before the process's first CUDA call.
            DeviceFaultError: the device context faulted.
        """
        check(lib().ds_vctx_gate_close(self.handle), "ds_vctx_gate_close")

    def gate_open(self) -> None:
        """Opens the vCtx's gate (``ds_vctx_gate_open``; any thread): its
        queued work resumes in program order and a waiting owner thread goes
        on. Opening an open gate does nothing."""
        check(lib().ds_vctx_gate_open(self.handle), "ds_vctx_gate_open")

    @contextmanager
    def gate_closed(self) -> Iterator["VCtx"]:
        """Closes the gate for the ``with`` block and always reopens it, even
        when the block raises (gates do not nest: it reopens a gate that was
        already closed before the block, too)::

            with be.gate_closed():          # from the scheduler's thread
                run_latency_critical_work()

        Do not launch on this vCtx from its owner thread inside the block: the
        launch would wait for the gate this block holds closed (until the
        runtime's teardown timeout reopens it).

        Raises:
            NotSupportedError, LimitError, DeviceFaultError: as
                :meth:`gate_close` (then nothing was closed).
        """
        self.gate_close()
        try:
            yield self
        finally:
            if self._handle is not None:  # closing the vCtx opened it already
                self.gate_open()


# ---------------------------------------------------------------------------
# graphs


@dataclass(frozen=True)
class GraphPCtxStats:
    """One pCtx's instantiation of a graph (``ds_graph_pctx_stats``)."""

    pctx: int  #: pool index
    instantiated: bool  #: the pCtx has an instantiation
    nodes: int  #: nodes of the instantiated graph
    kernel_nodes: int  #: of which kernel nodes
    capture_us: float  #: wall time of the capture function's call, us (0 for graph_from_cuda_graph)
    instantiate_us: float  #: wall time of cuGraphInstantiate plus cuGraphUpload, us
    #: drop in the device's free memory across the instantiation and upload,
    #: bytes; approximate (other threads' allocations count too, the driver
    #: allocates in 2 MiB pages). The capture's own tensors (the graph's
    #: memory pool) are not in it.
    device_bytes: int
    launches: int  #: launches of this instantiation


#: ``ds_graph_uncut`` (``GraphStats.uncut``): why automatic cuts made no cut
_UNCUT_NAMES = {
    T.DS_GRAPH_UNCUT_NONE: "none",  # cut as asked, or segment_us 0
    T.DS_GRAPH_UNCUT_PENDING: "pending",  # not yet: the first replay measures the step
    T.DS_GRAPH_UNCUT_NO_CUT: "no_cut",  # the DAG never narrows to one node
    T.DS_GRAPH_UNCUT_MEMORY: "memory",  # the graph allocates or frees memory (memory nodes)
    T.DS_GRAPH_UNCUT_FITS: "fits",  # every piece already fits segment_us
    T.DS_GRAPH_UNCUT_NO_API: "no_api",  # the driver lacks cuGraphClone, cuGraphGetEdges ...
}


@dataclass(frozen=True)
class GraphStats:
    """A graph's statistics (``ds_graph_get_stats``)."""

    launches: int  #: replays that launched (all pCtxs)
    #: one entry per pCtx of the pool, by pool index; pCtxs outside the
    #: graph's set, and those a lazy graph has not captured yet, read
    #: ``instantiated=False`` and zero
    pctx: Tuple[GraphPCtxStats, ...]
    pieces: int  #: pieces: :func:`graph_cut` calls plus one, or the graphs of :meth:`VCtx.graph_from_cuda_graphs`
    segments: int  #: segments a replay is launched as (``pieces`` until the automatic cut is made)
    segment_us: int  #: the graph's ``segment_us`` (0: no automatic cuts)
    #: why automatic cuts made no cut: ``"none"`` (cut as asked, or
    #: ``segment_us`` 0), ``"pending"`` (the first replay measures the step),
    #: ``"no_cut"`` (the DAG never narrows to one node), ``"memory"`` (memory
    #: alloc/free nodes), ``"fits"`` (every piece already fits ``segment_us``),
    #: ``"no_api"`` (the driver lacks cuGraphClone, cuGraphGetEdges ...)
    uncut: str
    cut_points: int  #: places the DAG could be cut, all pieces together
    calibrated_pctx: int  #: pool index the automatic cut was measured on
    step_us: float  #: the measured step (automatic cuts), us; 0.0 before
    longest_segment_us: float  #: its longest segment in the measuring step, us

    @property
    def instantiated(self) -> Tuple[int, ...]:
        """Pool indices that have an instantiation."""
        return tuple(p.pctx for p in self.pctx if p.instantiated)


@dataclass(frozen=True)
class GraphSegment:
    """One segment of a graph (``ds_graph_segment``): a unit of a replay,
    launched and accounted like a kernel (decision, remap, window, gate, its
    own profile)."""

    piece: int  #: the piece it belongs to
    nodes: int  #: its nodes
    kernel_nodes: int  #: of which kernel nodes
    calibrated_us: float  #: its time in the measuring step, us (0.0: not measured)
    #: its duration per pCtx of the pool, by pool index, from its timed
    #: launches (the profile's estimate), us; 0.0 where not measured yet
    measured_us: Tuple[float, ...]
    samples: Tuple[int, ...]  #: timed launches behind ``measured_us``, by pool index
    index: int  #: the segment, 0 to ``GraphStats.segments - 1``, in launch order


def _raw_cuda_graph(graph: Any, what: str, function: str = "") -> Tuple[int, Any]:
    """(CUgraph as int, the object to keep alive or None) of a
    ``torch.cuda.CUDAGraph`` or a CUgraph given as int (0..2**64-1)."""
    if isinstance(graph, int) and not isinstance(graph, bool):
        return _int(what, graph, 0, _PTR_MAX, function), None
    raw_fn = getattr(graph, "raw_cuda_graph", None)
    if raw_fn is None:
        raise TypeError(f"{_where(function)}{what} must be a torch.cuda.CUDAGraph or a CUgraph as int, "
                        f"not {type(graph).__name__}")
    return int(raw_fn()), graph


# The stream the capture function running on this thread was handed
# (Graph._trampoline sets it around the call), for graph_cut().
_capture_tls = threading.local()


def graph_cut(stream: Optional[int] = None) -> None:
    """Inside the function of :meth:`VCtx.graph` (or the ``capture_fn`` of
    :meth:`VCtx.graph_raw`): ends the current piece of the step here; the
    work enqueued after it starts the next one (``ds_graph_cut``)::

        def step():
            h = embed(tokens)
            for layer in layers:
                h = layer(h)
                detshare.graph_cut()          # each layer a unit of its own
            return head(h)

        g = vctx.graph(step)                  # g.stats().pieces == len(layers) + 1

    Each piece is launched as a unit the policy sees (remap, gate, window
    between them), in order, and the output is bitwise the same as uncut.
    Every stream forked from the capturing stream must be joined back into
    it before the cut. A cut at the very start, or right after another cut,
    makes no empty piece.

    Args:
        stream: the capturing stream as int (what ``capture_fn`` was
            handed); ``None`` (default) = the one of the capture running on
            this thread.

    Raises:
        InvalidArgumentError: no capture of this library is running on this
            thread, or ``stream`` is not its capturing stream.
        CaptureError: ending or beginning the capture failed (a forked stream
            not joined back): the whole capture then fails.
        OutOfMemoryError: the host is out of memory.
        TypeError: ``stream`` neither an int nor ``None``.

    Thread-safety: the thread running the capture function.
    """
    s = getattr(_capture_tls, "stream", None) if stream is None else _ptr("stream", stream, "graph_cut")
    check(lib().ds_graph_cut(c_void_p(s) if s else None), "ds_graph_cut")


def _output_tensors(out: Any, name: str) -> Tuple[Optional[Tuple[Any, ...]], bool]:
    """(tensors, single) of what a graph's fn returned; (None, False) for None."""
    if out is None:
        return None, False
    import torch

    if isinstance(out, torch.Tensor):
        return (out,), True
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return tuple(out), False
    raise TypeError(f"graph '{name}': fn must return a tensor, a tuple or list of tensors, or None, "
                    f"not {type(out).__name__}")


def _check_same_outputs(name: str, static: Optional[Tuple[Any, ...]], flat: Optional[Tuple[Any, ...]]) -> None:
    def sig(ts: Optional[Tuple[Any, ...]]) -> Any:
        return None if ts is None else [(tuple(t.shape), t.dtype, t.device) for t in ts]

    if sig(static) != sig(flat):
        raise ValueError(f"graph '{name}': fn returned {sig(flat)} on this pCtx but {sig(static)} at the first "
                         "capture; it must return the same outputs every time")


class Graph:
    """A CUDA graph that follows its vCtx: one instantiation per pCtx, and
    each replay launches the one of the pCtx the vCtx is bound to now
    (``ds_graph_t``). Make it with :meth:`VCtx.graph` (PyTorch),
    :meth:`VCtx.graph_raw` (a capture function of your own),
    :meth:`VCtx.graph_from_cuda_graph` or :meth:`VCtx.graph_from_cuda_graphs`;
    use it as a context manager or call :meth:`close`. A replay is one unit
    per segment (:func:`graph_cut`, ``segment_us``; :meth:`segments`).

    Every instantiation has the same kernels and launch configurations (the
    library checks at each capture), so the output never depends on the pCtx
    that ran it. Replays are ordered with the vCtx's other work across
    remaps, so the instantiations, which share the capture's buffers, never
    run at once.

    Thread-safety: :meth:`replay`, :meth:`segment`, :meth:`segments` and
    :meth:`close` on the owner thread of the vCtx; :meth:`stats` from any
    thread while the graph lives. Closing
    the vCtx or the runtime destroys its graphs.

    Attributes:
        vctx: the vCtx that made it, the only one it runs on.
        name: for logs and errors.
        outputs: for :meth:`VCtx.graph`, the static output tensor (or tuple
            of them) every replay writes, whichever pCtx runs it (``None``
            until the first capture, i.e. the first replay of a lazy graph,
            and when ``fn`` returns ``None``); for the others what was given
            (``None`` by default). Read them after the vCtx's work is done
            (:meth:`VCtx.synchronize`) or on a stream ordered after it.
    """

    def __init__(self, vctx: "VCtx", name: Optional[str], pctxs: Optional[Sequence[int]], eager: bool,
                 segment_us: int = 0) -> None:
        self._handle: Optional[int] = None
        self.vctx = vctx
        self.name: str = name if name is not None else "graph"
        self.eager = bool(eager)
        self.segment_us = segment_us  # checked by the caller (_segment_us)
        self._pctx_arg: Optional[Tuple[int, ...]] = (
            None if pctxs is None else tuple(_u32(f"pctxs[{i}]", p, "Graph") for i, p in enumerate(pctxs)))
        self.outputs: Any = None
        self._static: Optional[Tuple[Any, ...]] = None
        self._have_static = False
        self._keep: List[Any] = []  # what the instantiations' memory depends on (pools, torch graphs)
        self._capture: Optional[Callable[[int], Optional[int]]] = None
        self._cb: Any = None  # the ctypes trampoline; C keeps calling it for lazy captures
        self._error: Optional[BaseException] = None
        self._launch_fn = lib().ds_graph_launch

    # -- creation (VCtx.graph*) ----------------------------------------------

    def _attr(self) -> Tuple[T.ds_graph_attr, Any]:
        a = T.ds_graph_attr()
        self._name_b = self.name.encode()
        a.name = self._name_b
        a.flags = T.DS_GRAPH_EAGER if self.eager else 0
        a.segment_us = self.segment_us
        arr = None
        if self._pctx_arg is not None:
            arr = (c_uint32 * max(len(self._pctx_arg), 1))(*self._pctx_arg)
            a.pctxs = ctypes.cast(arr, POINTER(c_uint32))
            a.num_pctxs = len(self._pctx_arg)
        return a, arr  # arr must outlive the call (the library copies it)

    def _trampoline(self, stream: Optional[int], _user: Optional[int]) -> int:
        """The ds_graph_capture_fn: never lets an exception cross into C."""
        prev = getattr(_capture_tls, "stream", None)
        _capture_tls.stream = stream or 0  # for graph_cut() in the capture function
        try:
            assert self._capture is not None
            try:
                rc = self._capture(stream or 0)
            finally:
                _capture_tls.stream = prev
            if rc is None:
                return 0
            rc = int(rc)
            return rc if -(2**31) <= rc < 2**31 else 1
        except BaseException as e:  # noqa: BLE001 (re-raised after the library call returns)
            # The finished frames of the capture (use_mem_pool's among them)
            # hold the graph's memory pool: their locals go now, so the pool
            # is freed with the graph and not by a later garbage collection,
            # which may come during another capture (torch then aborts or the
            # capture is invalidated; measured on an H200).
            traceback.clear_frames(e.__traceback__)
            if self._error is None:
                self._error = e
            return 1

    def _raise_for(self, status: int, function: str) -> None:
        """Raises for a failed call that may have run the capture function: its
        exception, chained to the library's error, else the library's error."""
        err, self._error = self._error, None
        if status == DS_SUCCESS:
            return
        try:
            check(status, function)
        except DetShareError as ds_err:
            if err is None:
                raise
            try:
                raise err from ds_err
            finally:
                err = None  # no cycle through this frame: the error goes when the caller drops it

    def _create(self, capture: Callable[[int], Optional[int]]) -> None:
        self._capture = capture
        self._cb = T.DS_GRAPH_CAPTURE_FN(self._trampoline)
        attr, _arr = self._attr()
        out = c_void_p()
        self._error = None
        st = lib().ds_graph_create(self.vctx.handle, self._cb, None, byref(attr), byref(out))
        if st != DS_SUCCESS:
            self._detach()  # nothing was made: its pool goes now, not at a later collection
        self._raise_for(st, "ds_graph_create")
        self._adopt(out.value)

    def _adopt(self, handle: Optional[int]) -> None:
        self._handle = handle
        self.vctx._graphs[id(self)] = self

    def _detach(self) -> None:
        """The library destroyed the graph: drop what its instantiations needed."""
        self._handle = None
        self._cb = None
        self._capture = None
        self._static = None
        self._keep.clear()  # outputs stay readable as long as the caller holds them

    # -- use -------------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The ``ds_graph_t`` as int. Raises InvalidHandleError once destroyed."""
        h = self._handle
        if h is None:
            raise InvalidHandleError(f"graph '{self.name}' was destroyed", function="Graph")
        return h

    @property
    def closed(self) -> bool:
        return self._handle is None

    def replay(self) -> Any:
        """Launches the graph on its vCtx (``ds_graph_launch``), as one unit
        like a kernel: the policy sees it (``ds_launch_event.graph``), a
        pending remap, hold, closed gate or window applies first, then the
        instantiation of the pCtx the vCtx is bound to runs on the vCtx's
        stream, after the vCtx's earlier work. Returns without waiting for
        the graph to finish (:meth:`VCtx.synchronize`).

        A lazy graph (``eager=False``) captures the bound pCtx first if it has
        no instantiation there: the capture function runs inside this call.

        Returns:
            :attr:`outputs`.

        Raises:
            NotFoundError: the vCtx is bound to a pCtx outside the graph's set
                (nothing launched).
            CaptureError: a lazy capture failed (nothing launched; the next
                replay there tries again); if the capture function raised, its
                exception is raised, chained to the CaptureError.
            InvalidHandleError: the graph (or its vCtx) was destroyed.
            TimeoutError: held by the policy or its gate past the teardown
                timeout; in a vCtx group, as for :meth:`VCtx.launch`.
            PeerLostError: in a vCtx group, as for :meth:`VCtx.launch` (a
                replay is one unit of the group, each segment of a segmented
                graph one).
            DeviceFaultError, DriverError: the device failed.

        Owner thread. Once the pCtx has an instantiation the library call is
        lock-free and allocation-free.
        """
        return self._launch_on(self.vctx)

    launch = replay

    def _launch_on(self, vctx: "VCtx") -> Any:
        h = self._handle
        if h is None:
            raise InvalidHandleError(f"graph '{self.name}' was destroyed", function="ds_graph_launch")
        st = self._launch_fn(vctx.handle, h)
        if st != DS_SUCCESS:
            self._raise_for(st, "ds_graph_launch")
        return self.outputs

    def stats(self) -> GraphStats:
        """Per-pCtx instantiations, node counts, capture and instantiation
        times, device memory and launches (``ds_graph_get_stats``; any
        thread, relaxed reads)."""
        st = T.ds_graph_stats()
        check(lib().ds_graph_get_stats(self.handle, byref(st)), "ds_graph_get_stats")
        return _from_struct(
            GraphStats,
            st,
            pctx=tuple(
                _from_struct(GraphPCtxStats, p, pctx=i, instantiated=bool(p.instantiated))
                for i, p in enumerate(st.pctx[: st.num_pctx])
            ),
            uncut=_UNCUT_NAMES.get(st.uncut, f"unknown({st.uncut})"),
        )

    def segment(self, index: int) -> GraphSegment:
        """One segment of the graph (``ds_graph_get_segment``): its piece,
        nodes, and its measured duration per pCtx.

        Args:
            index: 0 to ``stats().segments - 1``; segments change once, at
                the automatic cut (the first replay with ``segment_us``).

        Raises:
            InvalidArgumentError: ``index`` out of range.
            InvalidHandleError: the graph was destroyed.
            InvalidArgumentError: also ``index`` negative or past 32 bits,
                from the binding (a ValueError too).
            TypeError: ``index`` not an int.

        Owner thread of the vCtx.
        """
        i = _u32("index", index, "Graph.segment")
        n = self._num_pctx()
        return self._segment(i, n)

    def segments(self) -> List[GraphSegment]:
        """Every segment of the graph, in launch order (:meth:`segment` for
        each of ``stats().segments``). Owner thread of the vCtx."""
        st = T.ds_graph_stats()
        check(lib().ds_graph_get_stats(self.handle, byref(st)), "ds_graph_get_stats")
        return [self._segment(i, st.num_pctx) for i in range(st.segments)]

    def _num_pctx(self) -> int:
        st = T.ds_graph_stats()
        check(lib().ds_graph_get_stats(self.handle, byref(st)), "ds_graph_get_stats")
        return int(st.num_pctx)

    def _segment(self, index: int, num_pctx: int) -> GraphSegment:
        seg = T.ds_graph_segment()
        check(lib().ds_graph_get_segment(self.handle, index, byref(seg)), "ds_graph_get_segment")
        return _from_struct(
            GraphSegment,
            seg,
            index=index,
            measured_us=tuple(seg.measured_us[:num_pctx]),
            samples=tuple(seg.samples[:num_pctx]),
        )

    def close(self, synchronize: bool = True) -> None:
        """Destroys the graph's instantiations and the graph
        (``ds_graph_destroy``), then releases its memory pool (the
        :attr:`outputs` stay valid while referenced). Idempotent; a graph
        whose vCtx was closed is already destroyed.

        Args:
            synchronize: wait for the vCtx's work first
                (:meth:`VCtx.synchronize`), which the library requires. With
                ``False`` and work in flight,
                :class:`~detshare.errors.BusyError` is raised and the graph
                kept.

        Raises:
            BusyError: ``synchronize=False`` and the vCtx's work is in flight.
            DeviceFaultError: the device faulted (the graph is destroyed
                anyway).

        Owner thread of the vCtx.
        """
        h = self._handle
        if h is None:
            return
        if synchronize:
            try:
                self.vctx.synchronize()
            except DeviceFaultError:
                pass  # ds_graph_destroy reports it, and destroys anyway
        st = lib().ds_graph_destroy(h)
        if st in (DS_SUCCESS, DeviceFaultError.status):
            self.vctx._graphs.pop(id(self), None)
            self._detach()
        check(st, "ds_graph_destroy")

    destroy = close

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "destroyed" if self._handle is None else f"0x{self._handle:x}"
        return f"<detshare.Graph '{self.name}' of vCtx '{self.vctx.name}' {state}>"


__all__ = [
    "BUILTIN_POLICIES",
    "DEFAULT_POLICY",
    "Anchor",
    "Dim",
    "GATES_NONE",
    "GRAPH_MAX_SEGMENTS",
    "GRAPH_SEGMENT_MAX_US",
    "GRAPH_SEGMENT_MIN_US",
    "GateMode",
    "Graph",
    "GraphPCtxStats",
    "GraphSegment",
    "GraphStats",
    "LogLevel",
    "PCtxInfo",
    "Phase",
    "REQUEST_WINDOW",
    "VCTX_GROUP_MAX_RANKS",
    "VCTX_GROUP_NAME_MAX",
    "RckMode",
    "Request",
    "Runtime",
    "RuntimeInfo",
    "RuntimeStats",
    "Tier",
    "VCtx",
    "VCtxClass",
    "VCtxStats",
    "graph_cut",
    "library_version",
    "log_to_logging",
    "set_log_handler",
]

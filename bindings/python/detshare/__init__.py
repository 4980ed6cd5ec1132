"""detshare: Python binding of libdetshare (deterministic GPU sharing through
virtual contexts), over ctypes.

    import detshare
    with detshare.Runtime("cuda", policy="slo_aware") as rt:
        ls = rt.vctx("decode", cls="ls", slo_us=500)
        with ls.section() as s, torch.cuda.stream(s):   # torch.cuda.ExternalStream
            logits = model(tokens)
        ls.remap(1)                                      # next kernel boundary
        g = ls.graph(lambda: model(static_tokens))       # one CUDA graph per pCtx
        logits = g.replay()                              # runs where ls is bound now

:mod:`detshare.serving` multiplexes an engine's prefill and decode (PDMux).

The shared library is found through ``$DETSHARE_LIBRARY``, then
``pkg-config detshare``, then the source tree's ``build*/src/libdetshare.so``
(:func:`find_library`), then the dynamic linker (``LD_LIBRARY_PATH``, the
``ldconfig`` cache) for ``libdetshare.so.0``, and loaded on first use. Every failing call raises the
:class:`DetShareError` subclass of its ``ds_status`` (:mod:`detshare.errors`),
with the library's ``ds_last_error_message()``.
"""

from . import errors, serving
from ._lib import LibraryNotFoundError, find_library, library_path
from .errors import *  # noqa: F401,F403  (one class per ds_status)
from .errors import ERROR_CLASSES, STATUS_TABLE, DetShareError, check, error_for
from .runtime import (
    BUILTIN_POLICIES,
    DEFAULT_POLICY,
    GATES_NONE,
    GRAPH_MAX_SEGMENTS,
    GRAPH_SEGMENT_MAX_US,
    GRAPH_SEGMENT_MIN_US,
    REQUEST_WINDOW,
    Anchor,
    GateMode,
    Graph,
    GraphPCtxStats,
    GraphSegment,
    GraphStats,
    LogLevel,
    PCtxInfo,
    Phase,
    RckMode,
    Request,
    Runtime,
    RuntimeInfo,
    RuntimeStats,
    Tier,
    VCtx,
    VCtxClass,
    VCtxStats,
    graph_cut,
    library_version,
    log_to_logging,
    set_log_handler,
)
from .sim import SimConfig, SimDevice, SimKernel, SimKernelRecord

__version__ = "0.2.0"

__all__ = [
    "BUILTIN_POLICIES",
    "DEFAULT_POLICY",
    "ERROR_CLASSES",
    "GATES_NONE",
    "GRAPH_MAX_SEGMENTS",
    "GRAPH_SEGMENT_MAX_US",
    "GRAPH_SEGMENT_MIN_US",
    "REQUEST_WINDOW",
    "STATUS_TABLE",
    "Anchor",
    "DetShareError",
    "GateMode",
    "Graph",
    "GraphPCtxStats",
    "GraphSegment",
    "GraphStats",
    "LibraryNotFoundError",
    "LogLevel",
    "PCtxInfo",
    "Phase",
    "RckMode",
    "Request",
    "Runtime",
    "RuntimeInfo",
    "RuntimeStats",
    "SimConfig",
    "SimDevice",
    "SimKernel",
    "SimKernelRecord",
    "Tier",
    "VCtx",
    "VCtxClass",
    "VCtxStats",
    "check",
    "error_for",
    "errors",
    "find_library",
    "graph_cut",
    "library_path",
    "library_version",
    "log_to_logging",
    "serving",
    "set_log_handler",
] + [c.__name__ for c in ERROR_CLASSES.values()]

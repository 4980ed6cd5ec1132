"""ctypes mirrors of the structs in include/detshare/{detshare,policy,sim}.h.

Field order and types follow the headers exactly (x86-64 / aarch64 LP64; C
enums are ``int``). The structs that carry a ``{size, magic, version}`` header
are checked by the library itself (``DS_ERR_ABI_MISMATCH`` on a wrong size),
so a drift shows up as an error rather than as corrupted memory; the test
suite also checks every size and the sim trace layout.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

DS_ABI_VERSION = 1
DS_ABI_MAGIC = 0x44534831  # "DSH1"

DS_MAX_PCTX = 32
DS_MAX_GROUPS = 64
DS_MAX_SMS = 256
DS_MAX_POLICIES = 16
DS_SIM_MAX_PARAMS = 16
DS_SIM_PARAM_BYTES = 256
DS_REQUEST_WINDOW = 256  # requests in the window of ds_vctx_stats::request_p50_us / request_p99_us
DS_VCTX_ATTR_SIZE_V1 = 48  # sizeof(ds_vctx_attr) before the group fields (still accepted, as no group)
DS_VCTX_GROUP_NAME_MAX = 47  # longest ds_vctx_attr::group, characters
DS_VCTX_GROUP_MAX_RANKS = 64  # most ranks in a vCtx group
DS_VCTX_GROUP_SHARED = 1  # ds_vctx_attr::group_flags: the ranks are in processes of one host

# enum values (detshare.h)
DS_DEVICE_CUDA = 0
DS_DEVICE_SIM = 1
DS_ANCHOR_LOW = 0
DS_ANCHOR_HIGH = 1
DS_ANCHOR_FULL = 2
DS_PHASE_NONE = 0
DS_PHASE_PREFILL = 1
DS_PHASE_DECODE = 2
DS_CLASS_BEST_EFFORT = 0
DS_CLASS_LATENCY_SENSITIVE = 1
DS_SIM_CLOCK_VIRTUAL = 0
DS_SIM_CLOCK_REALTIME = 1
DS_GATES_AUTO = 0
DS_GATES_HOST = 1
DS_GATES_RCK = 2
DS_GATES_OFF = 3
DS_GATES_NONE = 0xFFFFFFFF
DS_RCK_OFF = 0
DS_RCK_ON = 1

# Opaque handles and driver handles are pointers; ctypes gives them as int/None.
ds_runtime_t = c_void_p
ds_vctx_t = c_void_p
ds_graph_t = c_void_p
ds_request_t = c_uint64  # a begun request (ds_vctx_request_begin): its start on the runtime's clock; never 0
CUfunction = c_void_p
CUgraph = c_void_p
CUstream = c_void_p
ds_status_t = c_int

# void (*ds_log_fn)(ds_log_level, const char *, void *)
DS_LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)

# int (*ds_graph_capture_fn)(CUstream stream, void *user)
DS_GRAPH_CAPTURE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)

# ds_graph_attr::flags
DS_GRAPH_EAGER = 1
# ds_graph_attr::segment_us: 0, or DS_GRAPH_SEGMENT_MIN_US to DS_GRAPH_SEGMENT_MAX_US (us)
DS_GRAPH_SEGMENT_MIN_US = 100
DS_GRAPH_SEGMENT_MAX_US = 10_000_000
DS_GRAPH_MAX_SEGMENTS = 4096  # most segments (and pieces) one graph may have
# enum ds_graph_uncut (ds_graph_stats::uncut): why automatic cuts made no cut
DS_GRAPH_UNCUT_NONE = 0
DS_GRAPH_UNCUT_PENDING = 1
DS_GRAPH_UNCUT_NO_CUT = 2
DS_GRAPH_UNCUT_MEMORY = 3
DS_GRAPH_UNCUT_FITS = 4
DS_GRAPH_UNCUT_NO_API = 5


class _Header(Structure):
    """Base for structs that start with {size, magic, version}."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.size = ctypes.sizeof(self)
        self.magic = DS_ABI_MAGIC
        self.version = DS_ABI_VERSION


_HDR = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32)]


class ds_dim3(Structure):
    _fields_ = [("x", c_uint32), ("y", c_uint32), ("z", c_uint32)]


class ds_tier_spec(Structure):
    _fields_ = [("sm_count", c_uint32), ("anchor", c_int)]


class ds_sim_config(_Header):
    _fields_ = _HDR + [
        ("sm_count", c_uint32),
        ("min_partition_sms", c_uint32),
        ("sm_alignment", c_uint32),
        ("clock", c_int),
        ("time_scale", c_double),
        ("launch_overhead_us", c_double),
        ("trace_capacity", c_uint32),
    ]

    def __init__(self) -> None:  # DS_SIM_CONFIG_INIT
        super().__init__()
        self.sm_count = 132
        self.min_partition_sms = 8
        self.sm_alignment = 8
        self.clock = DS_SIM_CLOCK_VIRTUAL
        self.time_scale = 1.0
        self.launch_overhead_us = 0.0
        self.trace_capacity = 65536


class ds_runtime_config(_Header):
    _fields_ = _HDR + [
        ("device", c_int),
        ("device_ordinal", c_int),
        ("tiers", POINTER(ds_tier_spec)),
        ("num_tiers", c_uint32),
        ("max_vctx", c_uint32),
        ("teardown_timeout_ms", c_uint32),
        ("sim", POINTER(ds_sim_config)),
        ("policy", c_char_p),
        ("scheduler_period_us", c_int32),
        ("ls_sms", c_uint32),
        ("idle_us", c_uint32),
        ("be_window_us", c_uint32),
        ("gates", c_int),
        ("rck", c_int),
        ("gate_interval_us", c_uint32),
        ("heartbeat_timeout_ms", c_uint32),
        ("fault_presume_ms", c_uint32),
    ]


class ds_pctx_info(Structure):
    _fields_ = [
        ("index", c_uint32),
        ("sm_count", c_uint32),
        ("anchor", c_int),
        ("group_mask", c_uint64),
        ("complement", c_int32),
    ]


class ds_runtime_info(_Header):
    _fields_ = _HDR + [
        ("device", c_int),
        ("device_name", c_char * 256),
        ("driver_version", c_int),
        ("compute_capability", c_int),
        ("sm_count", c_uint32),
        ("min_partition_sms", c_uint32),
        ("sm_alignment", c_uint32),
        ("num_groups", c_uint32),
        ("group_sm_count", c_uint32 * DS_MAX_GROUPS),
        ("num_pctx", c_uint32),
        ("pctx", ds_pctx_info * DS_MAX_PCTX),
        ("pool_build_ms", c_double),
        ("max_connections", c_uint32),
        ("connections_needed", c_uint32),
        ("stream_priority_least", c_int),
        ("stream_priority_greatest", c_int),
        ("local_cpus", c_char * 256),
        ("numa_node", c_int),
    ]


class ds_vctx_attr(_Header):
    _fields_ = _HDR + [
        ("name", c_char_p),
        ("cls", c_int),
        ("priority", c_int),
        ("slo_us", c_uint32),
        ("weight", c_uint32),
        ("initial_pctx", c_int32),
        ("phase", c_int),
        # grew here (DS_VCTX_ATTR_SIZE_V1 is the size before): vCtx groups
        ("group", c_char_p),
        ("group_ranks", c_uint32),
        ("group_rank", c_uint32),
        ("group_flags", c_uint32),
    ]

    def __init__(self) -> None:  # DS_VCTX_ATTR_INIT
        super().__init__()
        self.cls = DS_CLASS_BEST_EFFORT
        self.weight = 1
        self.initial_pctx = -1


class ds_launch_hints(_Header):
    _fields_ = _HDR + [("expected_us", c_uint32), ("phase", c_int)]


class ds_vctx_stats(_Header):
    _fields_ = _HDR + [
        ("launches", c_uint64),
        ("sections", c_uint64),
        ("remaps", c_uint64),
        ("sampled_kernels", c_uint64),
        ("kernel_time_ns", c_uint64),
        ("pctx", c_uint32),
        ("streams", c_uint32),
        ("holds", c_uint64),
        ("window_us", c_uint32),
        ("urgent", c_int),
        ("inflight_us", c_double),
        ("gate_interval_us", c_uint32),
        ("gate_closed", c_int),
        ("gates", c_uint64),
        ("gate_closes", c_uint64),
        ("gate_closed_us", c_uint64),
        ("gate_holds", c_uint64),
        ("overruns", c_uint64),
        ("graph_launches", c_uint64),
        ("requests", c_uint64),
        ("requests_over_slo", c_uint64),
        ("requests_over_slo_runs", c_uint64),
        ("request_window", c_uint32),
        ("request_window_over_slo", c_uint32),
        ("request_p50_us", c_double),
        ("request_p99_us", c_double),
        ("yields", c_uint64),
        ("yield_p50_us", c_double),
        ("yield_p99_us", c_double),
        ("yield_max_us", c_double),
        ("group_units", c_uint64),
        ("group_wait_us", c_double),
    ]


class ds_runtime_stats(_Header):
    _fields_ = _HDR + [
        ("gates", c_int),
        ("rck_running", c_int),
        ("rck_sm_count", c_uint32),
        ("rck_beats", c_uint64),
        ("heartbeat_age_us", c_double),
        ("heartbeat_misses", c_uint64),
        ("overruns", c_uint64),
        ("boundaries", c_uint64),
        ("rck_profile_samples", c_uint64),
        ("gates_closed", c_uint32),
        ("max_closed_gates", c_uint32),
        ("gate_refusals", c_uint64),
        ("gate_expiries", c_uint64),
    ]


class ds_policy_ops(_Header):
    """Hooks are plain function addresses (c_void_p): the binding registers
    policies written in C (a loaded shared object), not Python callables."""

    _fields_ = _HDR + [
        ("name", c_char_p),
        ("init", c_void_p),
        ("fini", c_void_p),
        ("on_activate", c_void_p),
        ("on_vctx_create", c_void_p),
        ("on_vctx_destroy", c_void_p),
        ("on_launch", c_void_p),
        ("on_completion", c_void_p),
        ("on_congestion", c_void_p),
        ("on_tick", c_void_p),
        ("tick_us", c_uint32),
        ("params", c_void_p),
        ("num_params", c_uint32),
        ("on_param", c_void_p),
    ]


class ds_graph_attr(_Header):
    _fields_ = _HDR + [
        ("name", c_char_p),
        ("flags", c_uint32),
        ("pctxs", POINTER(c_uint32)),
        ("num_pctxs", c_uint32),
        ("segment_us", c_uint32),
    ]


class ds_graph_pctx_stats(Structure):
    _fields_ = [
        ("instantiated", c_int),
        ("nodes", c_uint32),
        ("kernel_nodes", c_uint32),
        ("capture_us", c_double),
        ("instantiate_us", c_double),
        ("device_bytes", c_int64),
        ("launches", c_uint64),
    ]


class ds_graph_stats(_Header):
    _fields_ = _HDR + [
        ("num_pctx", c_uint32),
        ("launches", c_uint64),
        ("pctx", ds_graph_pctx_stats * DS_MAX_PCTX),
        ("pieces", c_uint32),
        ("segments", c_uint32),
        ("segment_us", c_uint32),
        ("uncut", c_uint32),
        ("cut_points", c_uint32),
        ("calibrated_pctx", c_uint32),
        ("step_us", c_double),
        ("longest_segment_us", c_double),
    ]


class ds_graph_segment(_Header):
    _fields_ = _HDR + [
        ("piece", c_uint32),
        ("nodes", c_uint32),
        ("kernel_nodes", c_uint32),
        ("calibrated_us", c_double),
        ("measured_us", c_double * DS_MAX_PCTX),
        ("samples", c_uint32 * DS_MAX_PCTX),
    ]


class ds_sim_kernel_desc(_Header):
    _fields_ = _HDR + [
        ("name", c_char_p),
        ("block_us", c_double),
        ("blocks_per_sm", c_uint32),
        ("num_params", c_uint32),
        ("param_sizes", c_uint32 * DS_SIM_MAX_PARAMS),
        ("faults", c_uint32),
    ]

    def __init__(self) -> None:  # DS_SIM_KERNEL_DESC_INIT
        super().__init__()
        self.block_us = 10.0
        self.blocks_per_sm = 1


class ds_sim_kernel_record(Structure):
    _fields_ = [
        ("seq", c_uint64),
        ("function", c_void_p),
        ("name", c_char * 64),
        ("stream", c_void_p),
        ("grid", ds_dim3),
        ("block", ds_dim3),
        ("shared_mem_bytes", c_uint32),
        ("param_bytes", c_uint32),
        ("params", c_uint8 * DS_SIM_PARAM_BYTES),
        ("submit_us", c_double),
        ("start_us", c_double),
        ("end_us", c_double),
        ("sm_mask", c_uint64 * (DS_MAX_SMS // 64)),
    ]


# sizeof() of each struct as the C compiler lays it out on LP64 Linux
# (checked by the tests; printed by a C program from the headers).
EXPECTED_SIZES = {
    "ds_runtime_config": 104,
    "ds_tier_spec": 8,
    "ds_pctx_info": 32,
    "ds_runtime_info": 1872,
    "ds_vctx_attr": 72,
    "ds_launch_hints": 24,
    "ds_vctx_stats": 240,
    "ds_runtime_stats": 104,
    "ds_policy_ops": 128,
    "ds_graph_attr": 48,
    "ds_graph_pctx_stats": 48,
    "ds_graph_stats": 1608,
    "ds_graph_segment": 424,
    "ds_sim_config": 56,
    "ds_sim_kernel_desc": 112,
    "ds_sim_kernel_record": 432,
}

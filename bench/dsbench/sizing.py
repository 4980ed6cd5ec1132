"""slo_aware's sizing rule for Python: src/policy/sizing.c through ctypes (libdssizing), the code the policy
runs, so that no tool keeps a copy of the rule.

The library is found by $DS_SIZING_LIBRARY, else in the repository's build folder (build/src/, from
`meson setup build && ninja -C build`).

    from dsbench import sizing
    z = sizing.Sizing([32, 64, 96], start=2, target=0.99)   # starts on 96 SMs
    z.step(req=5, over=0, runs=0, now_us=5.0, p99_share=0.4)  # -> ("stay", 2)
"""
import ctypes

from . import clib

ENV = "DS_SIZING_LIBRARY"
MAX_LEVELS = 33  # DS_SIZING_MAX_LEVELS
_NAME = "libdssizing.so"
_lib = None
KINDS = ("stay", "start", "up", "down", "probe_held", "cap_check", "cap_up", "capped", "top_missed")
PHASES = {"judge": 0, "hold": 1, "moved": 2}
DESCENT = {"none": 0, "first": 1, "always": 2}


class SizingLibraryError(RuntimeError):
    """libdssizing cannot be found or loaded, or is not the one this wrapper was written for."""


class Config(ctypes.Structure):
    """ds_sizing_config (src/policy/sizing.h), field for field."""
    _fields_ = [("nlev", ctypes.c_uint32), ("sms", ctypes.c_uint32 * MAX_LEVELS), ("has_full", ctypes.c_int),
                ("start", ctypes.c_uint32), ("target", ctypes.c_double), ("shrink_requests", ctypes.c_uint32),
                ("dwell_us", ctypes.c_double), ("request_window", ctypes.c_uint32),
                ("probe_fail_sd", ctypes.c_double), ("probe_hold_sd", ctypes.c_double),
                ("probe_hold", ctypes.c_uint32), ("probe_max", ctypes.c_uint32), ("cap_sd", ctypes.c_double),
                ("dispersion_prior", ctypes.c_double), ("dispersion_max", ctypes.c_double),
                ("descent", ctypes.c_int), ("held_long", ctypes.c_double), ("forget_within_sd", ctypes.c_double),
                ("overload_stay", ctypes.c_uint32)]


class Input(ctypes.Structure):
    """ds_sizing_input, field for field."""
    _fields_ = [("req", ctypes.c_uint64), ("over", ctypes.c_uint64), ("runs", ctypes.c_uint64),
                ("p99_share", ctypes.c_double), ("now_us", ctypes.c_double), ("phase", ctypes.c_int),
                ("full_allowed", ctypes.c_int), ("reserving", ctypes.c_int), ("may_expand", ctypes.c_int),
                ("pressed", ctypes.c_int)]


class Action(ctypes.Structure):
    """ds_sizing_action, field for field."""
    _fields_ = [("kind", ctypes.c_int), ("from_", ctypes.c_int), ("to", ctypes.c_int), ("warn_top", ctypes.c_int),
                ("confirm", ctypes.c_int), ("capped_worse", ctypes.c_int), ("n", ctypes.c_double),
                ("late", ctypes.c_double), ("ref_share", ctypes.c_double)]


def library_path():
    """Where libdssizing is: $DS_SIZING_LIBRARY, else build/src/ of this repository; raises SizingLibraryError
    naming both when neither holds it."""
    return clib.find(ENV, _NAME, "src", SizingLibraryError)


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path, lib = clib.load(ENV, _NAME, "src", SizingLibraryError)
    lib.ds_sizing_size.restype = ctypes.c_size_t
    lib.ds_sizing_size.argtypes = [ctypes.c_int]
    lib.ds_sizing_config_default.restype = None
    lib.ds_sizing_config_default.argtypes = [ctypes.POINTER(Config)]
    lib.ds_sizing_init.restype = None
    lib.ds_sizing_init.argtypes = [ctypes.c_void_p, ctypes.POINTER(Config)]
    lib.ds_sizing_step.restype = Action
    lib.ds_sizing_step.argtypes = [ctypes.c_void_p, ctypes.POINTER(Input)]
    lib.ds_sizing_level.restype = ctypes.c_int
    lib.ds_sizing_level.argtypes = [ctypes.c_void_p]
    for which, struct in ((1, Config), (2, Input), (3, Action)):
        if lib.ds_sizing_size(which) != ctypes.sizeof(struct):
            raise SizingLibraryError(f"{path}: {struct.__name__} is {lib.ds_sizing_size(which)} bytes there, "
                                     f"{ctypes.sizeof(struct)} here: rebuild it, or update this wrapper")
    _lib = lib
    return lib


def default_config():
    """slo_aware's constants (ds_sizing_config_default) in a Config, with an empty ladder."""
    cfg = Config()
    _load().ds_sizing_config_default(ctypes.byref(cfg))
    return cfg


class Sizing:
    """One sizing state machine on a ladder of SM counts (smallest first); keyword arguments set Config fields
    (target, shrink_requests, dwell_us, probe_fail_sd, descent ("none", "first", "always"), ...)."""

    def __init__(self, ladder, start=0, **fields):
        lib = _load()
        if not 0 < len(ladder) <= MAX_LEVELS:
            raise ValueError(f"a ladder of 1 to {MAX_LEVELS} levels, not {len(ladder)}")
        cfg = default_config()
        cfg.nlev = len(ladder)
        for k, sms in enumerate(ladder):
            cfg.sms[k] = int(sms)
        cfg.start = start
        for name, value in fields.items():
            if name == "descent":
                value = DESCENT[value]
            if name not in dict(Config._fields_):
                raise ValueError(f"no sizing parameter {name!r}")
            setattr(cfg, name, value)
        self._state = ctypes.create_string_buffer(lib.ds_sizing_size(0))
        self._in = Input()
        lib.ds_sizing_init(self._state, ctypes.byref(cfg))

    @property
    def level(self):
        """The current level (-1 before the first step)."""
        return _lib.ds_sizing_level(self._state)

    def step(self, req, over, runs, now_us, p99_share, phase="judge"):
        """One decision from LS's cumulative counts: (kind, level after it), kind one of KINDS."""
        i = self._in
        i.req, i.over, i.runs, i.now_us, i.p99_share, i.phase = req, over, runs, now_us, p99_share, PHASES[phase]
        a = _lib.ds_sizing_step(self._state, ctypes.byref(i))
        return KINDS[a.kind], a.to

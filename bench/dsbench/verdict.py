"""The right-sizing verdict for Python: bench/common/verdict.c through ctypes (libdsverdict), the one
implementation colocate and serve use, so that no tool keeps a copy of the rule.

The rule (bench/common/verdict.h, docs/benchmarks.md): each configuration's attainment is Wilson's 95% score
interval of (requests within the SLO, requests) summed over all repetitions; a configuration meets the target
when the interval's upper end reaches it and clearly meets it when its lower end does. The judged
configuration passes when (a) it meets the target, or no baseline clearly meets it; (b) its median BE
throughput is at least the best clearly meeting baseline's minus be_tolerance (0.03), or none clearly meets;
(c) no baseline is as good on both medians (LS tail, BE) and better on one with the repetitions' ranges apart.

The library is found by $DS_VERDICT_LIBRARY, else in the repository's build folder (build/bench/, from
`meson setup build && ninja -C build`).

    from dsbench import verdict
    v = verdict.judge({"static@64": {"baseline": True, "lat": (1.4, 1.3, 1.5), "be": (0.64, 0.63, 0.65),
                                     "within": 5970, "total": 6000},
                       "slo_aware": {"lat": 1.45, "be": 0.635, "within": 5950, "total": 6000}},
                      judged="slo_aware", target=0.99)
    v["ok"], v["attainment_interval"]["slo_aware"]
"""
import ctypes
import math

from . import clib

ENV = "DS_VERDICT_LIBRARY"
MAX = 32  # VERDICT_MAX
_NAME = "libdsverdict.so"
_lib = None


class VerdictLibraryError(RuntimeError):
    """libdsverdict cannot be found or loaded, or is not the one this wrapper was written for."""


class _Flat(ctypes.Structure):
    """ds_verdict_flat (bench/common/verdict.h), field for field."""
    _fields_ = [("target", ctypes.c_double), ("be_tolerance", ctypes.c_double), ("z", ctypes.c_double),
                ("lo", ctypes.c_double * MAX), ("hi", ctypes.c_double * MAX),
                ("meeting", ctypes.c_int * MAX), ("clearly", ctypes.c_int * MAX),
                ("dominated_by", ctypes.c_int * MAX),
                ("n_meeting", ctypes.c_int), ("n_clearly", ctypes.c_int), ("n_dominated", ctypes.c_int),
                ("best", ctypes.c_int), ("best_be", ctypes.c_double),
                ("judged_ran", ctypes.c_int), ("meets", ctypes.c_int), ("clearly_meets", ctypes.c_int),
                ("be_minus_best", ctypes.c_double), ("ok", ctypes.c_int)]


def library_path():
    """Where libdsverdict is: $DS_VERDICT_LIBRARY, else build/bench/ of this repository; raises
    VerdictLibraryError naming both when neither holds it."""
    return clib.find(ENV, _NAME, "bench", VerdictLibraryError)


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path, lib = clib.load(ENV, _NAME, "bench", VerdictLibraryError)
    dp = ctypes.POINTER(ctypes.c_double)
    lib.ds_verdict_flat_size.restype = ctypes.c_size_t
    lib.ds_verdict_flat_size.argtypes = []
    lib.ds_verdict_wilson.restype = ctypes.c_int
    lib.ds_verdict_wilson.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.c_double, dp, dp]
    lib.ds_verdict_judge_flat.restype = ctypes.c_int
    lib.ds_verdict_judge_flat.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_int), ctypes.c_size_t] + \
        [dp] * 8 + [ctypes.c_double, ctypes.POINTER(_Flat)]
    if lib.ds_verdict_flat_size() != ctypes.sizeof(_Flat):
        raise VerdictLibraryError(f"{path}: ds_verdict_flat is {lib.ds_verdict_flat_size()} bytes, this wrapper "
                                  f"expects {ctypes.sizeof(_Flat)}: rebuild the library from this tree")
    _lib = lib
    return lib


Z = 1.959964  # VERDICT_Z: a two-sided 95% interval


def wilson(within, total, z=Z):
    """Wilson's score interval (lo, hi) of within successes out of total; total 0 gives (0, 1). ValueError on
    counts that are not counts."""
    lo, hi = ctypes.c_double(), ctypes.c_double()
    if _load().ds_verdict_wilson(float(within), float(total), float(z), ctypes.byref(lo), ctypes.byref(hi)):
        raise ValueError(f"no interval for {within} of {total} (z {z})")
    return lo.value, hi.value


def _ranged(x, what, name):
    """(med, min, max) from a number (one run) or a triple; NaN for None."""
    if x is None:
        return (math.nan,) * 3
    if isinstance(x, (int, float)):
        return (float(x),) * 3
    try:
        med, lo, hi = (math.nan if v is None else float(v) for v in x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {what} must be a number or (median, min, max), not {x!r}") from None
    return med, lo, hi


def _nan(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def judge(configs, judged, target, key="slo_aware"):
    """The verdict of `judged` (a name in configs, or None: it did not run) against the configurations of
    configs marked "baseline": configs maps a name to {"baseline": bool, "lat": tail, "be": BE throughput,
    "within": requests within the SLO, "total": requests} (tail and BE a number or (median, min, max); the
    counts summed over the repetitions). Returns the fields colocate and serve write (verdict_json), with the
    judged one's under `key`: target, baselines_meeting, baselines_clearly_meeting, best_baseline,
    best_baseline_be, be_tolerance, attainment_interval {name: [lo, hi]}, attainment_counts
    {name: [within, total]}, judged, <key>_meets, <key>_clearly_meets, <key>_be_minus_best,
    <key>_dominated_by, ok. ValueError on input the rule cannot judge."""
    names = list(configs)
    n = len(names)
    if not 0 < n <= MAX:
        raise ValueError(f"between 1 and {MAX} configurations, not {n}")
    if judged is not None and judged not in configs:
        raise ValueError(f"judged configuration {judged!r} is not among {names}")
    s = names.index(judged) if judged is not None else n
    arr = ctypes.c_double * n
    cols = {k: [] for k in ("lat_med", "lat_min", "lat_max", "be_med", "be_min", "be_max", "within", "total")}
    base = (ctypes.c_int * n)()
    for i, name in enumerate(names):
        c = configs[name]
        base[i] = int(bool(c.get("baseline"))) if i != s else 0
        for what in ("lat", "be"):
            for col, v in zip(("med", "min", "max"), _ranged(c.get(what), what, name)):
                cols[f"{what}_{col}"].append(v)
        for what in ("within", "total"):
            v = c.get(what)
            cols[what].append(math.nan if v is None else float(v))
    out = _Flat()
    rc = _load().ds_verdict_judge_flat(n, base, s, *(arr(*cols[k]) for k in cols), float(target),
                                       ctypes.byref(out))
    if rc:
        raise ValueError(f"the verdict cannot judge this input: counts of the baselines and the judged must be "
                         f"0 <= within <= total, the target in (0, 1] (target {target})")
    counted = [i for i in range(n) if base[i] or i == s]
    v = {"target": out.target,
         "baselines_meeting": [names[i] for i in range(n) if out.meeting[i]],
         "baselines_clearly_meeting": [names[i] for i in range(n) if out.clearly[i]],
         "best_baseline": names[out.best] if out.best >= 0 else None,
         "best_baseline_be": _nan(out.best_be),
         "be_tolerance": out.be_tolerance,
         "attainment_z": out.z,
         "attainment_interval": {names[i]: [out.lo[i], out.hi[i]] for i in counted},
         "attainment_counts": {names[i]: [cols["within"][i], cols["total"][i]] for i in counted}}
    ran = bool(out.judged_ran)
    v["judged"] = judged if ran else None
    v[f"{key}_meets"] = bool(out.meets) if ran else None
    v[f"{key}_clearly_meets"] = bool(out.clearly_meets) if ran else None
    v[f"{key}_be_minus_best"] = _nan(out.be_minus_best) if ran else None
    v[f"{key}_dominated_by"] = [names[i] for i in range(n) if out.dominated_by[i]] if ran else None
    v["ok"] = bool(out.ok) if ran else None
    return v

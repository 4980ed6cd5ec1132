"""bench/dsbench/verdict.py, the ctypes wrapper of libdsverdict (bench/common/verdict.c): the same answers as
tests/test_verdict.c for the same figures, and clear errors. Run by the test dsbench_verdict
(bench/meson.build), which sets DS_VERDICT_LIBRARY to the library it built; skipped without it (the binding's
own test run does not build the benchmarks)."""
import os
import sys

import pytest
from conftest import REPO_ROOT, run_python

# bench/ on the path only for this import: left there, its torch/ folder
# would shadow PyTorch for the tests collected after this one
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import verdict  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))

needs_library = pytest.mark.skipif(not os.environ.get(verdict.ENV),
                                   reason=f"{verdict.ENV} unset: run by the meson test dsbench_verdict")


def fixture(judged_be=(0.635, 0.63, 0.645), judged_within=5950):
    """tests/test_verdict.c's setup(): two splits and slo_aware, three repetitions of 2000 requests."""
    return {
        "static@48": {"baseline": True, "lat": (1.8, 1.7, 1.9), "be": (0.72, 0.71, 0.73),
                      "within": 5880, "total": 6000},
        "static@64": {"baseline": True, "lat": (1.4, 1.3, 1.5), "be": (0.64, 0.63, 0.65),
                      "within": 5970, "total": 6000},
        "slo_aware": {"lat": (1.45, 1.35, 1.55), "be": judged_be, "within": judged_within, "total": 6000},
    }


@needs_library
def test_wilson_known_values():
    lo, hi = verdict.wilson(95, 100)
    assert lo == pytest.approx(0.88825, abs=5e-5) and hi == pytest.approx(0.97846, abs=5e-5)
    assert verdict.wilson(0, 0) == (0.0, 1.0)
    assert verdict.wilson(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        verdict.wilson(11, 10)


@needs_library
def test_a_judged_that_only_meets_passes_as_in_the_c_test():
    v = verdict.judge(fixture(), "slo_aware", 0.99)
    assert v["baselines_meeting"] == ["static@64"]
    assert v["baselines_clearly_meeting"] == ["static@64"]
    assert v["best_baseline"] == "static@64" and v["best_baseline_be"] == pytest.approx(0.64)
    assert v["slo_aware_meets"] is True and v["slo_aware_clearly_meets"] is False
    assert v["slo_aware_be_minus_best"] == pytest.approx(-0.005)
    assert v["slo_aware_dominated_by"] == []
    assert v["ok"] is True
    lo, hi = v["attainment_interval"]["slo_aware"]
    assert (round(lo, 4), round(hi, 4)) == (0.9890, 0.9937)  # the C test's printed line
    assert (lo, hi) == verdict.wilson(5950, 6000)
    assert v["attainment_counts"]["static@64"] == [5970, 6000]
    assert v["be_tolerance"] == 0.03


@needs_library
def test_be_tolerance_and_a_miss_as_in_the_c_test():
    assert verdict.judge(fixture(judged_be=(0.609, 0.60, 0.635)), "slo_aware", 0.99)["ok"] is False
    assert verdict.judge(fixture(judged_be=(0.611, 0.60, 0.635)), "slo_aware", 0.99)["ok"] is True
    v = verdict.judge(fixture(judged_within=5900), "slo_aware", 0.99)
    assert v["slo_aware_meets"] is False and v["ok"] is False


@needs_library
def test_one_run_numbers_a_judged_that_did_not_run_and_another_key():
    cfgs = {"static": {"baseline": True, "lat": 1.4, "be": 0.64, "within": 2000, "total": 2000},
            "slo_aware": {"lat": 1.3, "be": 0.5, "within": 1990, "total": 2000}}
    v = verdict.judge(cfgs, "slo_aware", 0.99)
    assert v["ok"] is False and v["slo_aware_be_minus_best"] == pytest.approx(-0.14)
    v = verdict.judge(cfgs, None, 0.99)
    assert v["judged"] is None and v["ok"] is None and v["slo_aware_meets"] is None
    assert v["best_baseline"] == "static"
    v = verdict.judge(cfgs, "slo_aware", 0.99, key="judged")
    assert "judged_meets" in v and not any(k.startswith("slo_aware_") for k in v)


@needs_library
def test_bad_input_is_a_value_error():
    bad = fixture()
    bad["static@64"]["within"] = 6001
    with pytest.raises(ValueError, match="cannot judge"):
        verdict.judge(bad, "slo_aware", 0.99)
    with pytest.raises(ValueError, match="cannot judge"):
        verdict.judge(fixture(), "slo_aware", 1.5)
    with pytest.raises(ValueError, match="not among"):
        verdict.judge(fixture(), "tpot_first", 0.99)
    with pytest.raises(ValueError, match="between 1 and"):
        verdict.judge({}, None, 0.99)
    with pytest.raises(ValueError, match="median, min, max"):
        verdict.judge({"a": {"baseline": True, "lat": "x", "within": 1, "total": 1}}, None, 0.99)


def test_a_missing_library_is_named_with_the_way_to_get_it(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from dsbench import verdict\n"
            "try:\n    verdict.wilson(1, 2)\n"
            "except verdict.VerdictLibraryError as e:\n    print('ERR', e)\n") % str(REPO_ROOT / "bench")
    r = run_python(code, env={verdict.ENV: str(tmp_path / "nope.so")})
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and verdict.ENV in r.stdout and "nope.so" in r.stdout


@needs_library
def test_replay_sizing_judges_with_the_shared_rule():
    """replay-sizing's verdict lines come from the library: a judged configuration at 0.9892 over 6000 requests
    (its interval reaches 0.99) beside a split clearly meeting it passes, where its own median copy of the
    rule said "misses"; baselines without counts get them from ls_attainment times requests_per_load."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        from dsbench import replay_sizing  # noqa: E402
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
    sweep = {"requests_per_load": 2000, "verdict": {"0.30": {"attainment_counts": {"static@64": [5970, 6000]}}}}
    cfgs = {"ls_alone": {"ls_p99_norm": 1.0},
            "static@64": {"ls_p99_norm": 1.4, "ls_p99_norm_min": 1.3, "ls_p99_norm_max": 1.5,
                          "be_tput_norm": 0.64, "be_tput_norm_min": 0.63, "be_tput_norm_max": 0.65},
            "static@48": {"ls_p99_norm": 1.8, "be_tput_norm": 0.72, "ls_attainment_reps": [0.98, 0.981, 0.979]},
            "slo_aware": {"ls_p99_norm": 1.45, "be_tput_norm": 0.635}}
    bases = replay_sizing.sweep_baselines(sweep, "0.30", cfgs)
    assert set(bases) == {"static@64", "static@48"}
    assert (bases["static@64"]["within"], bases["static@64"]["total"]) == (5970, 6000)
    assert (bases["static@48"]["within"], bases["static@48"]["total"]) == (1960 + 1962 + 1958, 6000)
    # three repetitions: (SMs, attainment, BE, within, requests, ls_p99_norm)
    reps = [(64, 0.9885, 0.63, 1977, 2000, 1.35), (64, 0.9895, 0.635, 1979, 2000, 1.45),
            (64, 0.9895, 0.645, 1979, 2000, 1.55)]
    judged = replay_sizing.judged_config(reps)
    assert judged["within"] == 5935 and judged["total"] == 6000
    assert judged["be"] == (0.635, 0.63, 0.645)
    line = replay_sizing.verdict(bases, judged, 0.99)
    assert line.startswith("ok (attainment [0.9862, 0.9915] meets; BE -0.005 vs static@64"), line
    low_be = [r[:2] + (0.60,) + r[3:] for r in reps]
    assert replay_sizing.verdict(bases, replay_sizing.judged_config(low_be), 0.99).startswith("NOT ok")


def test_the_tools_read_the_restated_verdict():
    """plot-results' line and results-readme's cell of a file with attainment intervals: slo_aware's interval,
    "clearly meets", and a miss beside a clearly meeting split counted beyond the ranges (no library needed)."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        from dsbench import plot_results, results_readme  # noqa: E402
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
    vd = {"target": 0.99, "baselines_meeting": [], "baselines_clearly_meeting": [], "best_baseline": None,
          "best_baseline_be": None, "be_tolerance": 0.03, "attainment_interval": {"slo_aware": [0.9801, 0.9912]},
          "slo_aware_meets": True, "slo_aware_be_minus_best": None, "slo_aware_dominated_by": [], "ok": True}
    assert plot_results.verdict_text(vd) == "ok, no baseline clearly meets [0.9801, 0.9912]"
    assert results_readme.verdict_cell(vd, {}) == "ok (no split clearly meets)"
    # a miss where static@64 clearly meets, the attainment ranges overlapping: beyond the ranges all the same
    row = {"slo_aware": {"ls_attainment_min": 0.985, "ls_attainment_max": 0.992, "be_tput_norm_min": 0.6,
                         "be_tput_norm_max": 0.7},
           "static@64": {"ls_attainment_min": 0.990, "ls_attainment_max": 0.996, "be_tput_norm_min": 0.6,
                         "be_tput_norm_max": 0.7}}
    vd.update(baselines_meeting=["static@64"], baselines_clearly_meeting=["static@64"], best_baseline="static@64",
              best_baseline_be=0.64, slo_aware_meets=False, slo_aware_be_minus_best=0.0, ok=False)
    assert results_readme.verdict_cell(vd, row) == "**not ok** (misses; beyond ranges)"
    # the same figures in a file from before the intervals: the ranges overlap, so within them
    old = {k: v for k, v in vd.items() if k not in ("attainment_interval", "baselines_clearly_meeting")}
    assert results_readme.verdict_cell(old, row) == "**not ok** (misses; within ranges)"


def _colocate_arrivals():
    sys.path.insert(0, str(REPO_ROOT / "bench" / "torch"))
    try:
        import colocate_arrivals
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "torch"))
    return colocate_arrivals


def _arrivals_load(slo_tpot, base_tpot, base_be):
    """One load of a colocate_arrivals result: 3 windows of 200 requests, LS alone's p99 10 ms (so the SLO
    is 13 ms at factor 1.3), slo_aware and one baseline with the given TPOTs and BE."""
    reps = [{"ls_alone": {"tpot_ms": [10.0] * 200},
             "configs": {"slo_aware": {"tpot_ms": slo_tpot, "unfinished": 0},
                         "reserve@32": {"tpot_ms": base_tpot, "unfinished": 0}}} for _ in range(3)]
    rng = lambda x: {"median": x, "min": x, "max": x}  # noqa: E731
    summary = {"slo_aware": {"tpot_p99_norm": rng(1.2), "be_norm": rng(0.60)},
               "reserve@32": {"tpot_p99_norm": rng(1.25), "be_norm": rng(base_be)},
               "ls_alone": {}, "be_alone": {}}
    return {"reps": reps, "summary": summary}


@needs_library
def test_colocate_arrivals_verdict_reads_the_tpot_counts():
    ca = _colocate_arrivals()
    # both within on all 600 requests: the baseline clearly meets 0.99 ([0.9937, 1]); slo_aware's BE 0.60
    # trails its 0.72 by more than 0.03 -> NOT ok; at 0.62 ok
    v = ca.judge_load(_arrivals_load([12.0] * 200, [12.0] * 200, 0.72), 1.3, 0.99)
    assert v["attainment_counts"]["slo_aware"] == [600, 600]
    assert v["baselines_clearly_meeting"] == ["reserve@32"] and v["ok"] is False
    assert ca.judge_load(_arrivals_load([12.0] * 200, [12.0] * 200, 0.62), 1.3, 0.99)["ok"] is True
    # the baseline late on 10 of each 200 (570/600, upper end 0.966): nothing clearly meets -> ok
    v = ca.judge_load(_arrivals_load([12.0] * 200, [12.0] * 190 + [14.0] * 10, 0.72), 1.3, 0.99)
    assert v["baselines_clearly_meeting"] == [] and v["baselines_meeting"] == [] and v["ok"] is True
    assert ca.verdict_line(v).endswith("-> ok") and "570/600" not in ca.verdict_line(v)


def test_colocate_arrivals_verdict_without_the_library_says_why(monkeypatch):
    ca = _colocate_arrivals()
    monkeypatch.setenv(verdict.ENV, "/nonexistent/libdsverdict.so")
    monkeypatch.setattr(verdict, "_lib", None)  # not the one an earlier test loaded
    v = ca.judge_load(_arrivals_load([12.0] * 200, [12.0] * 200, 0.72), 1.3, 0.99)
    assert "no such file" in v["error"]
    assert ca.verdict_line(v).startswith("no verdict (")


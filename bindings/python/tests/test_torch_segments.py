"""The logic of bench/torch/segments_torch.py and colocate_arrivals.py that
runs without a GPU: argument checks, the figures they derive, the prefill
buckets, the configurations and the arrival schedule from the Azure trace,
and exit 77 when torch or a GPU is missing. Their GPU runs are the lead's."""

from __future__ import annotations

import importlib
import math
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench" / "torch"))

segments_torch = importlib.import_module("segments_torch")
colocate_arrivals = importlib.import_module("colocate_arrivals")


def have_torch_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# ---- segments_torch ---------------------------------------------------------------------


def test_segments_jobs_take_bert_for_bert_large_once_each():
    assert segments_torch.job_list("resnet50,bert,bert_large") == ["resnet50", "bert_large"]
    with pytest.raises(ValueError, match="alexnet"):
        segments_torch.job_list("alexnet")


def test_segments_defaults_and_batch_alias():
    a = segments_torch.parse_args([])
    assert (a.job_list, a.segment_us, a.reps, a.steps, a.bitwise_steps) == (["resnet50", "bert_large"], 1000, 3, 30, 10)
    assert segments_torch.parse_args(["--batch", "bert=8"]).batches == {"bert_large": 8}


@pytest.mark.parametrize("argv", [["--segment-us", "99"], ["--segment-us", "10000001"], ["--reps", "0"],
                                  ["--jobs", ""], ["--jobs", "nope"], ["--steps", "0"]])
def test_segments_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit):
        segments_torch.parse_args(argv)


def test_segments_variants_alternate_which_goes_first():
    assert segments_torch.variant_order(0) == ("unsegmented", "segmented")
    assert segments_torch.variant_order(1) == ("segmented", "unsegmented")
    assert segments_torch.variant_order(2) == segments_torch.variant_order(0)


def test_segments_ratio_is_per_repetition_with_median_and_range():
    r = segments_torch.ratio_summary([98.0, 99.0, 95.0], [100.0, 100.0, 100.0])
    assert r["per_rep"] == pytest.approx([0.98, 0.99, 0.95])
    assert (r["median"], r["min"], r["max"]) == pytest.approx((0.98, 0.95, 0.99))
    assert r["meets_target"] is True
    assert segments_torch.ratio_summary([90.0], [100.0])["meets_target"] is False
    assert segments_torch.ratio_summary([], [])["meets_target"] is False


def test_segments_host_share_is_per_step():
    h = segments_torch.share_summary([10.0, 20.0, 300.0], [1000.0, 1000.0, 1000.0])
    assert h["share_p50"] == pytest.approx(0.02)
    assert h["share_p99"] == pytest.approx(0.3)
    assert h["meets_target"] is True
    assert segments_torch.share_summary([100.0], [1000.0])["meets_target"] is False


@pytest.mark.skipif(have_torch_gpu(), reason="torch and a GPU are present: the benchmark would run")
def test_segments_without_torch_or_gpu_runs_nothing(tmp_path):
    assert segments_torch.main(["--out", str(tmp_path / "s.json")]) == 77
    assert not (tmp_path / "s.json").exists()


# ---- colocate_arrivals ------------------------------------------------------------------


def test_arrivals_prefill_buckets_and_bucket_for():
    assert colocate_arrivals.prefill_buckets(2048) == [128, 256, 512, 1024, 2048]
    assert colocate_arrivals.prefill_buckets(1000) == [128, 256, 512, 1000]
    assert colocate_arrivals.prefill_buckets(64) == [64]
    b = colocate_arrivals.prefill_buckets(2048)
    assert [colocate_arrivals.bucket_for(n, b) for n in (1, 128, 129, 2048, 5000)] == [128, 128, 256, 2048, 2048]


def test_arrivals_configs_parse_and_expand_static_to_every_low_tier():
    pc = colocate_arrivals.parse_config
    assert pc("shared") == ("shared", None, True)
    assert pc("static@32") == ("static", 32, True)
    assert pc("slo_aware/unseg") == ("slo_aware", None, False)
    assert pc("reserve@16/unseg") == ("reserve", 16, False)
    for bad in ("nope", "shared@32", "static@x", "reserve@0", "slo_aware/other"):
        with pytest.raises(ValueError):
            pc(bad)
    got = colocate_arrivals.expand_configs(colocate_arrivals.DEFAULT_CONFIGS.split(","), [64, 16, 32])
    assert got == ["shared", "priority", "static@16", "static@32", "static@64", "slo_aware", "tpot_first",
                   "slo_aware/unseg"]
    assert colocate_arrivals.expand_configs(["reserve", "reserve@32"], [32, 16]) == ["reserve@16", "reserve@32"]


class _FakeRuntime:
    def __init__(self):
        self.calls = []

    def set_policy(self, name):
        self.calls.append(("policy", name))

    def set_policy_param(self, policy, name, value):
        self.calls.append((policy, name, value))


def test_arrivals_reserve_runs_static_with_ls_on_the_whole_gpu():
    a = colocate_arrivals.parse_args([])
    rt = _FakeRuntime()
    assert colocate_arrivals.apply_config(rt, "reserve@32", a) == {"ls_sms": 32, "ls_whole_gpu": 1}
    assert rt.calls == [("policy", "static"), ("static", "ls_sms", 32), ("static", "ls_whole_gpu", 1)]
    rt = _FakeRuntime()
    assert colocate_arrivals.apply_config(rt, "static@64", a) == {"ls_sms": 64, "ls_whole_gpu": 0}
    rt = _FakeRuntime()
    assert colocate_arrivals.apply_config(rt, "slo_aware", a) == {"ls_sms": a.slo_ls_sms}
    assert rt.calls[0] == ("policy", "slo_aware")


def test_arrivals_defaults():
    a = colocate_arrivals.parse_args([])
    assert a.pair_list == [("llama3", "resnet50"), ("llama3", "bert_large")]
    assert a.load_list == [0.1, 0.2, 0.3, 0.5]
    assert (a.reps, a.max_prompt, a.max_tokens, a.segment_us) == (3, 2048, 64, 1000)
    assert a.ls_warmup_seconds == 2.0
    assert colocate_arrivals.parse_args(["--pairs", "llama3+bert"]).pair_list == [("llama3", "bert_large")]


@pytest.mark.parametrize("argv", [["--pairs", "gptj+resnet50"], ["--pairs", "llama3+alexnet"], ["--loads", "0"],
                                  ["--loads", "x"], ["--configs", "static@x"], ["--segment-us", "10"],
                                  ["--ls-warmup-seconds", "-1"]])
def test_arrivals_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit):
        colocate_arrivals.parse_args(argv)


class _FakeDecode:
    """serve()'s view of the decode tenant: its loop finishes every request
    handed over, 1 ms a step, without a GPU."""

    def __init__(self):
        import queue
        import threading
        self.queue, self.finished, self.expect, self.done = queue.Queue(), [], 0, threading.Event()
        self.steps, self.pf = [], None

    def start_loop(self):
        pass

    def end_loop(self):
        pass


class _FakePrefill:
    buckets = [128, 256]

    def __init__(self, dec):
        self.dec, self.reqs = dec, []

    def start_loop(self):  # every request: first token 2 ms after its arrival, then its steps
        for r in self.reqs:
            r.first = r.at_abs + 0.002
            r.end = r.first + r.steps * 0.001
            self.dec.steps.append((r.end, 0.001))
            self.dec.finished.append(r)
        self.dec.done.set()

    def end_loop(self):
        pass


def test_arrivals_serve_counts_only_the_requests_after_the_warmup():
    dec = _FakeDecode()
    pf = _FakePrefill(dec)
    sched = [(0.0, 100, 4), (0.1, 100, 4), (0.2, 200, 8), (0.3, 100, 2), (0.4, 100, 2)]
    s = colocate_arrivals.serve(pf, dec, sched, 1.0, 2)
    assert (s["requests"], s["unfinished"]) == (3, 0)
    assert s["t0"] == pf.reqs[2].at_abs  # the window starts at the first counted arrival
    assert len(s["ttft_ms"]) == len(s["tpot_ms"]) == 3
    assert s["decode_steps"] == 12 and s["prompt_tokens"] == 400
    assert len(s["step_tpot_ms"]) == 3  # the warm-up requests' steps ended before t0
    whole = colocate_arrivals.serve(pf, dec, sched, 1.0)
    assert whole["requests"] == 5 and whole["decode_steps"] == 20


def test_arrivals_schedule_scales_the_trace_to_the_rate_and_caps_lengths():
    trace = [(0.0, 5000, 100), (1.0, 10, 1), (3.0, 300, 70), (4.0, 40, 5), (10.0, 1, 1)]
    s = colocate_arrivals.schedule(trace, 0, 5, 2.0, 2048, 64)
    assert len(s) == 5
    assert s[0][0] == 0.0
    assert s[-1][0] == pytest.approx(2.0)  # 4 gaps at 2 req/s
    assert s[2][0] == pytest.approx(0.6)  # the trace's shape kept
    assert [p for _, p, _ in s] == [2048, 10, 300, 40, 1]
    assert [o for _, _, o in s] == [64, 1, 64, 5, 1]
    assert all(at == 0.0 for at, _, _ in colocate_arrivals.schedule(trace, 0, 5, 0.0, 2048, 64))  # all at once


def test_arrivals_schedule_reads_the_project_s_trace():
    a = colocate_arrivals.parse_args([])
    trace = colocate_arrivals.load_trace(a.trace)
    s = colocate_arrivals.schedule(trace, 1, 40, 10.0, a.max_prompt, a.max_tokens)
    assert len(s) == 40 and s[-1][0] == pytest.approx(3.9)
    assert all(1 <= p <= 2048 and 1 <= o <= 64 for _, p, o in s)


def test_arrivals_window_size_and_expected_duration():
    assert colocate_arrivals.requests_per_window(2.5, 4.0, 4) == 10
    assert colocate_arrivals.requests_per_window(0.1, 4.0, 4) == 4
    a = colocate_arrivals.parse_args(["--pairs", "llama3+resnet50", "--loads", "0.3"])
    n = len(colocate_arrivals.expand_configs(a.config_names, [16, 32, 64, 96, 112]))
    est = colocate_arrivals.expected_seconds(a, 1, 1, n)
    assert 120 < est < 540  # one pair at one load with 3 reps fits a 10-minute call


def test_arrivals_pooled_p99_and_ratio():
    reps = [{"tpot_ms": [1.0, 2.0]}, {"tpot_ms": [3.0]}, {}]
    assert colocate_arrivals.pooled_p99(reps, "tpot_ms") == 3.0
    assert math.isnan(colocate_arrivals.pooled_p99([], "tpot_ms"))
    assert colocate_arrivals.ratio(2.0, 4.0) == 0.5
    assert math.isnan(colocate_arrivals.ratio(1.0, 0.0)) and math.isnan(colocate_arrivals.ratio(1.0, float("nan")))


def test_arrivals_summary_pools_requests_over_repetitions():
    def cfg(tp, tt, be):
        return {"tpot_ms": tp, "ttft_ms": tt, "unfinished": 0, "tpot_p99_norm": 1.5, "ttft_p99_norm": 2.0,
                "be_norm": be, "be_norm_vs_unseg": be, "tpot_p99_ms": max(tp), "ttft_p99_ms": max(tt),
                "be_steps_per_s": 10 * be, "be_yield_p50_us": None, "be_yield_p99_us": 300.0, "be_yields": 4,
                "step_tpot_p99_ms": 9.0}

    reps = [{"ls_alone": {"tpot_ms": [1.0], "ttft_ms": [10.0], "tpot_p99_ms": 1.0, "ttft_p99_ms": 10.0},
             "be_alone": {"seg": {"steps_per_s": 60.0}, "unseg": {"steps_per_s": 61.0}},
             "configs": {"shared": cfg([2.0], [30.0], 0.5)}} for _ in range(3)]
    reps[2]["configs"]["shared"] = cfg([4.0], [20.0], 0.7)
    lr = {"reps": reps}
    colocate_arrivals.summarize(lr, ["shared", "priority"])
    s = lr["summary"]
    assert "priority" not in s  # never ran
    assert s["shared"]["be_norm"] == {"median": 0.5, "min": 0.5, "max": 0.7}
    assert s["shared"]["pooled"]["tpot_p99_norm"] == 4.0 and s["shared"]["pooled"]["requests"] == 3
    assert s["shared"]["be_yield_p50_us"]["median"] != s["shared"]["be_yield_p50_us"]["median"]  # None -> NaN
    assert s["be_alone"]["unseg"]["median"] == 61.0


@pytest.mark.skipif(have_torch_gpu(), reason="torch and a GPU are present: the benchmark would run")
def test_arrivals_without_torch_or_gpu_runs_nothing(tmp_path):
    assert colocate_arrivals.main(["--out", str(tmp_path / "a.json")]) == 77


def test_train_tenant_takes_segment_us():
    torch_jobs = importlib.import_module("torch_jobs")

    class FakeRt:
        pass

    t = torch_jobs.TrainTenant(FakeRt(), "be", "resnet50", None, 1, True, segment_us=1000)
    try:
        assert t.segment_us == 1000
    finally:
        t.worker.finish()


class _FakeGraph:
    """A graph whose replay takes `seconds` (synchronize returns at once)."""

    def __init__(self, seconds, log):
        self.seconds, self.log = seconds, log

    def replay(self):
        time.sleep(self.seconds)
        self.log.append(self.seconds)


class _FakeVCtx:
    def __init__(self):
        self.recorded = []

    def synchronize(self):
        pass

    def request_record(self, us):
        self.recorded.append(us)


def _fake_ls(decode_batch=2, record=True):
    a = colocate_arrivals.parse_args(["--decode-batch", str(decode_batch), "--max-prompt", "256"]
                                     + ([] if record else ["--no-record"]))
    dec = colocate_arrivals.ArrivalDecode(None, "llama3", a)
    pf = colocate_arrivals.Prefill(None, dec, a)
    log = []
    pf.graphs = {128: _FakeGraph(0.004, log), 256: _FakeGraph(0.008, log)}
    pf.vctx = _FakeVCtx()
    dec.graph, dec.vctx = _FakeGraph(0.002, log), _FakeVCtx()
    return pf, dec, log


def test_arrivals_serve_runs_prefill_then_continuous_batching_decode():
    pf, dec, _ = _fake_ls(decode_batch=2)
    try:
        # (arrival s, prompt tokens, decode steps): three requests at once, one later
        sched = [(0.0, 100, 3), (0.0, 200, 5), (0.0, 50, 2), (0.1, 10, 1)]
        s = colocate_arrivals.serve(pf, dec, sched, 5.0)
        assert (s["requests"], s["unfinished"]) == (4, 0)
        assert s["decode_steps"] == 11 and s["prompt_tokens"] == 360
        # FCFS prefill: TTFT 4, 12 (after the first) and 16 ms (after both) from the common arrival; the
        # late one 4 ms
        t = sorted(s["ttft_ms"])
        assert t[0] >= 4.0 and t[2] >= 12.0 and t[3] >= 16.0
        assert all(t >= 2.0 for t in s["tpot_ms"])  # a decode step takes 2 ms
        # at most 2 running: 11 request-steps need at least 6 decode steps
        assert len(dec.steps) >= 6
        assert len(dec.vctx.recorded) == len(dec.steps)  # every step recorded for slo_aware
        f = colocate_arrivals.ls_fig(s)
        assert f["requests"] == 4 and f["ttft_p99_ms"] == max(s["ttft_ms"])
        # a second window on the same tenants starts clean
        s2 = colocate_arrivals.serve(pf, dec, sched[:1], 5.0)
        assert (s2["requests"], s2["unfinished"], len(s2["tpot_ms"])) == (1, 0, 1)
    finally:
        pf.worker.finish()
        dec.worker.finish()


def test_arrivals_serve_counts_what_the_deadline_cut():
    pf, dec, _ = _fake_ls(decode_batch=1, record=False)
    try:
        s = colocate_arrivals.serve(pf, dec, [(0.0, 100, 64), (0.0, 100, 64)], 0.05)
        assert s["unfinished"] >= 1
        assert dec.vctx.recorded == []  # --no-record
    finally:
        pf.worker.finish()
        dec.worker.finish()


def _arrivals_rep(alone_tpot, **configs):
    return {"ls_alone": {"tpot_ms": alone_tpot},
            "configs": {k: {"tpot_ms": v[0], "unfinished": v[1]} for k, v in configs.items()}}


def test_arrivals_tpot_counts_judge_each_request_against_its_windows_alone_p99():
    # alone p99 10 ms in window 0, 20 ms in window 1: the SLO is 13 and 26 ms at factor 1.3
    reps = [_arrivals_rep([10.0] * 10, a=([12.0, 13.0, 14.0], 0)),
            _arrivals_rep([20.0] * 10, a=([25.0, 27.0], 2))]
    assert colocate_arrivals.tpot_counts(reps, "a", 1.3) == (3, 7)  # 12, 13 and 25 within; unfinished count
    assert colocate_arrivals.tpot_counts(reps, "missing", 1.3) == (0, 0)


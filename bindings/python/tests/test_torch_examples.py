"""The PyTorch examples' logic that runs without a GPU: argument checks, the
figures they derive (best over temporal, dominance), the tenant thread, and
exit 77 when torch or a GPU is missing (bench/torch/pairs_torch.py,
colocate_torch.py, torch_jobs.py), and that graph_decode.py and serve_torch.py
import and share decoder.py's model. Their GPU runs are in docs/results."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "bench" / "torch"
sys.path.insert(0, str(EXAMPLES))

pairs_torch = importlib.import_module("pairs_torch")
colocate_torch = importlib.import_module("colocate_torch")
torch_jobs = importlib.import_module("torch_jobs")
bench_common = importlib.import_module("bench_common")
decoder = importlib.import_module("decoder")
graph_decode = importlib.import_module("graph_decode")
serve_torch = importlib.import_module("serve_torch")


def have_torch_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# ---- decoder: one Llama decoder for the examples ------------------------------------------


def test_the_examples_share_decoder_py_s_llama():
    # graph_decode's model and torch_jobs' llama3 are decoder.Decoder; serve_torch's
    # engine model builds on decoder.Llama (weights, RoPE, norms, MLP)
    assert graph_decode.Decoder is decoder.Decoder is torch_jobs.Decoder
    assert issubclass(decoder.Decoder, decoder.Llama)
    assert issubclass(serve_torch.Model, decoder.Llama)


def test_provenance_starts_the_result_files_of_pairs_and_colocate(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench/torch/pairs_torch.py", "--seconds", "6"])
    info = argparse.Namespace(device_name="NVIDIA H100 80GB HBM3", driver_version=13000, sm_count=132)
    p = bench_common.provenance("pairs_torch", info, ["--pairs", "A B"])
    assert list(p) == ["benchmark", "device", "driver", "sms", "commit", "command", "date", "simulated"]
    assert (p["benchmark"], p["device"], p["sms"], p["simulated"]) == ("pairs_torch", info.device_name, 132, False)
    assert p["command"] == "python3 bench/torch/pairs_torch.py --pairs 'A B'"  # main's argv, quoted
    assert bench_common.provenance("x", info, None)["command"] == "python3 bench/torch/pairs_torch.py --seconds 6"


# ---- pairs_torch ------------------------------------------------------------------------


def test_pairs_parse_defaults_run_every_pair_and_temporal_first():
    a = pairs_torch.parse_args([])
    assert a.pair_list == list(pairs_torch.PAIRS)
    assert a.policy_list[0] == "temporal"
    assert sorted(a.policy_list) == sorted(pairs_torch.POLICIES)


def test_pairs_parse_keeps_temporal_once_and_reads_batches():
    a = pairs_torch.parse_args(["--policies", "shared,temporal,balance", "--batch", "resnet50=32,lstm=8"])
    assert a.policy_list == ["temporal", "shared", "balance"]
    assert a.batches == {"resnet50": 32, "lstm": 8}


@pytest.mark.parametrize("argv", [["--pairs", "Z"], ["--policies", "round_robin"], ["--batch", "resnet50=0"],
                                  ["--batch", "resnet50"]])
def test_pairs_parse_rejects_bad_input(argv, capsys):
    with pytest.raises(SystemExit) as e:
        pairs_torch.parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_pairs_every_job_of_a_pair_is_buildable_by_name():
    for a, b, contention in pairs_torch.PAIRS.values():
        assert a in torch_jobs.TRAIN_JOBS and b in torch_jobs.TRAIN_JOBS
        assert a in torch_jobs.DEFAULT_BATCH and b in torch_jobs.DEFAULT_BATCH
        assert contention in ("high", "low", "probe")


def test_pairs_summarize_names_the_best_and_the_adaptive_policy():
    pr = {"configs": {"temporal": {"sum_norm": 0.98}, "shared": {"sum_norm": 1.40},
                      "static": {"sum_norm": 1.47}, "balance": {"sum_norm": 1.45}, "slo_aware": {"sum_norm": 1.39}}}
    pairs_torch.summarize(pr)
    assert pr["best_policy"] == "static"
    assert pr["best_over_temporal"] == pytest.approx(1.47 / 0.98)
    assert pr["adaptive_policy"] == "balance"
    assert pr["adaptive_over_temporal"] == pytest.approx(1.45 / 0.98)
    assert pr["configs"]["temporal"]["over_temporal"] == pytest.approx(1.0)


def test_pairs_summarize_without_adaptive_policies_says_nothing_about_them():
    pr = {"configs": {"temporal": {"sum_norm": 1.0}, "shared": {"sum_norm": 1.2}}}
    pairs_torch.summarize(pr)
    assert pr["best_policy"] == "shared"
    assert "adaptive_policy" not in pr


@pytest.mark.skipif(have_torch_gpu(), reason="torch and a GPU are present: the example would run")
def test_pairs_without_torch_or_gpu_runs_nothing(tmp_path):
    out = tmp_path / "p.json"
    assert pairs_torch.main(["--out", str(out)]) == 77
    assert not out.exists()


# ---- colocate_torch ---------------------------------------------------------------------


def test_colocate_parse_defaults_are_the_four_table2_pairs():
    a = colocate_torch.parse_args([])
    assert a.pair_list == [("llama3", "resnet50"), ("llama3", "bert_large"), ("gptj", "resnet50"),
                           ("gptj", "bert_large")]
    assert a.reps >= 3
    assert a.policy_list == list(colocate_torch.POLICIES)


@pytest.mark.parametrize("argv", [["--pairs", "llama3"], ["--pairs", "opt+resnet50"], ["--pairs", "gptj+vit"],
                                  ["--policies", "fifo"], ["--reps", "0"], ["--batch", "bert_large=x"]])
def test_colocate_parse_rejects_bad_input(argv):
    with pytest.raises(SystemExit) as e:
        colocate_torch.parse_args(argv)
    assert e.value.code == 2


def _rep(p99):
    """A repetition whose configs have the given (TPOT p99 norm, BE norm) per policy."""
    return {"ls_alone": {"tpot_p50_ms": 7.0, "tpot_p99_ms": 7.1}, "be_alone": {"steps_per_s": 60.0},
            "configs": {pol: {"tpot_p50_norm": q * 0.9, "tpot_p99_norm": q, "be_norm": b, "tpot_p50_ms": 1.0,
                              "tpot_p99_ms": 1.0, "be_steps_per_s": 1.0} for pol, (q, b) in p99.items()}}


def _summary(points, bound=1.3):
    args = argparse.Namespace(policy_list=list(points), p99_bound=bound)
    pr = {"reps": [_rep(points)] * 3}
    colocate_torch.summarize(pr, args)
    return pr


def test_colocate_a_baseline_better_on_both_dominates_slo_aware():
    pr = _summary({"slo_aware": (1.30, 0.30), "static": (1.20, 0.40), "shared": (2.0, 0.7)})
    assert pr["slo_aware_dominated_by"] == ["static"]
    assert pr["slo_aware_p99_within"] is True


def test_colocate_a_trade_off_is_not_domination():
    pr = _summary({"slo_aware": (1.20, 0.30), "static": (1.30, 0.50), "tpot_first": (1.18, 0.25)})
    assert pr["slo_aware_dominated_by"] == []


def test_colocate_differences_within_the_tolerance_do_not_dominate():
    tol = colocate_torch.DOMINANCE_TOL
    close = (1.30 * (1 - tol / 2), 0.30)  # better by half the tolerance, equal on BE
    far = (1.30 * (1 - 2 * tol), 0.30)
    assert _summary({"slo_aware": (1.30, 0.30), "static": close})["slo_aware_dominated_by"] == []
    assert _summary({"slo_aware": (1.30, 0.30), "static": far})["slo_aware_dominated_by"] == ["static"]


def test_colocate_summary_gives_median_and_range_over_reps():
    args = argparse.Namespace(policy_list=["slo_aware"], p99_bound=1.3)
    pr = {"reps": [_rep({"slo_aware": (q, 0.3)}) for q in (1.1, 1.5, 1.2)]}
    colocate_torch.summarize(pr, args)
    m = pr["summary"]["slo_aware"]["tpot_p99_norm"]
    assert (m["median"], m["min"], m["max"]) == (1.2, 1.1, 1.5)
    assert pr["slo_aware_p99_within"] is True


def test_colocate_p99_bound_fails_above_it():
    assert _summary({"slo_aware": (1.31, 0.3)})["slo_aware_p99_within"] is False


@pytest.mark.skipif(have_torch_gpu(), reason="torch and a GPU are present: the example would run")
def test_colocate_without_torch_or_gpu_runs_nothing(tmp_path):
    assert colocate_torch.main(["--out", str(tmp_path / "c.json")]) == 77


# ---- torch_jobs: helpers and the tenant thread ------------------------------------------


def test_rate_in_counts_steps_ending_in_the_window():
    r = torch_jobs.rate_in([0.5, 1.0, 1.5, 2.0, 2.5, 3.5], 1.0, 3.0)
    assert r == {"steps": 4, "steps_per_s": 2.0}
    assert torch_jobs.rate_in([], 1.0, 1.0)["steps"] == 0


def test_host_share_is_enqueue_over_step_time():
    t = argparse.Namespace(ends=[1.0, 2.0, 3.0], host_us=[100.0, 200.0, 900.0], wall_ms=[10.0, 10.0, 10.0])
    h = torch_jobs.host_share(t, 0.5, 2.5)
    assert h["host_us_p50"] == 150.0
    assert h["host_over_step"] == pytest.approx(150.0 / 10000.0)
    empty = torch_jobs.host_share(t, 5.0, 6.0)
    assert empty["host_over_step"] != empty["host_over_step"]  # NaN: no step in the window


def test_worker_runs_calls_on_its_own_thread_and_reports_errors():
    w = torch_jobs.Worker("t")
    try:
        assert w.call(threading.current_thread) is w
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            w.call(lambda: 1 / 0)
        assert w.call(lambda x: x + 1, 41) == 42  # still serving after an error
    finally:
        w.finish()
    assert not w.is_alive()


def test_worker_loop_runs_until_ended():
    w = torch_jobs.Worker("loop")
    n = []

    def body(stop):
        while not stop.is_set():
            n.append(1)
            time.sleep(0.001)

    try:
        w.start_loop(body)
        time.sleep(0.05)
        w.end_loop()
        k = len(n)
        assert k > 0
        time.sleep(0.02)
        assert len(n) == k  # stopped
    finally:
        w.finish()


def test_worker_loop_error_surfaces_at_end_loop():
    w = torch_jobs.Worker("bad")

    def body(stop):
        raise ValueError("boom")

    try:
        w.start_loop(body)
        with pytest.raises(RuntimeError, match="boom"):
            w.end_loop()
    finally:
        w.finish()


def test_build_train_job_rejects_unknown_models():
    with pytest.raises(KeyError):
        torch_jobs.build_train_job("alexnet", None, None)


def test_tenant_runs_its_commands_and_loop_on_its_worker():
    class T(torch_jobs.Tenant):
        def __init__(self):
            super().__init__("t")
            self.loops = 0

        def _where(self):
            return threading.current_thread()

        def _loop(self, stop):
            while not stop.is_set():
                self.loops += 1
                time.sleep(0.001)

    t = T()
    try:
        assert t.call("where") is t.worker
        t.start_loop()
        assert t.looping
        time.sleep(0.02)
        t.end_loop()
        assert not t.looping and t.loops > 0
        with pytest.raises(AttributeError):
            t.call("missing")
    finally:
        t.worker.finish()


def test_tenant_shut_ends_its_loop_closes_on_its_thread_and_ends_the_thread():
    class T(torch_jobs.Tenant):
        def __init__(self):
            super().__init__("t")
            self.closed_on = None

        def _loop(self, stop):
            while not stop.is_set():
                time.sleep(0.001)

        def _close(self):
            self.closed_on = threading.current_thread()

    t = T()
    t.start_loop()
    t.shut()
    assert not t.looping and t.closed_on is t.worker
    assert not t.worker.is_alive()


# ---- serve_torch ------------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [(["--capacity-rps", "-1"], "must be >= 0"),
                                        (["--slo-ttft-ms", "-5"], "must be >= 0"),
                                        (["--name", "x y"], "--name 'x y'"),
                                        (["--name", ""], "--name ''")])
def test_serve_torch_rejects_bad_flags_before_it_looks_for_torch(argv, says, monkeypatch, capsys):
    # a second run (the tuned variant) takes the first run's capacity and SLOs and its own JSON name
    monkeypatch.setattr(sys, "argv", ["serve_torch.py"] + argv)
    with pytest.raises(SystemExit) as e:
        serve_torch.main()
    assert says in str(e.value)


def test_serve_torch_refuses_a_policy_log_it_cannot_write_before_it_looks_for_torch(tmp_path, monkeypatch):
    # the log is opened first: a run of minutes must not end in a failed open
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--log", str(tmp_path / "missing" / "policy.log")])
    with pytest.raises(SystemExit) as e:
        serve_torch.main()
    assert "--log" in str(e.value) and "No such file or directory" in str(e.value)
    assert serve_torch.parse_args().log == str(tmp_path / "missing" / "policy.log")


def test_serve_torch_takes_the_reserve_switch_and_refuses_other_values(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--reserve", "0"])
    assert serve_torch.parse_args().reserve == 0
    monkeypatch.setattr(sys, "argv", ["serve_torch.py"])
    assert serve_torch.parse_args().reserve is None  # the policy's own (1)
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--reserve", "2"])
    with pytest.raises(SystemExit):
        serve_torch.parse_args()
    assert "--reserve: invalid choice: 2" in capsys.readouterr().err


def test_serve_torch_takes_a_log_level_and_refuses_others(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["serve_torch.py"])
    assert serve_torch.parse_args().log_level == "info"
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--log-level", "debug"])
    assert serve_torch.parse_args().log_level == "debug"
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--log-level", "trace"])
    with pytest.raises(SystemExit):
        serve_torch.parse_args()
    assert "--log-level: invalid choice: 'trace'" in capsys.readouterr().err


def test_serve_torch_takes_capacity_and_name(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["serve_torch.py", "--capacity-rps", "28.9", "--slo-ttft-ms", "187",
                                      "--slo-tpot-ms", "11", "--name", "serve_torch_tuned"])
    a = serve_torch.parse_args()
    assert (a.capacity_rps, a.slo_ttft_ms, a.slo_tpot_ms, a.name) == (28.9, 187.0, 11.0, "serve_torch_tuned")
    monkeypatch.setattr(sys, "argv", ["serve_torch.py"])
    d = serve_torch.parse_args()
    assert (d.capacity_rps, d.name) == (0.0, "serve_torch")  # measured, the usual file


# ---- examples/python demos ----------------------------------------------------------------


@pytest.mark.skipif(have_torch_gpu(), reason="torch and a GPU are present: the demo would run")
@pytest.mark.parametrize("demo", ["graph_demo.py", "serving_demo.py"])
def test_demo_without_torch_or_gpu_skips(demo):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / demo)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 77, r.stdout + r.stderr
    assert "(skip)" in r.stdout

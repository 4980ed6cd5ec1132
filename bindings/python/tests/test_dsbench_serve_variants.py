"""bench/dsbench serve-variants: the serving defaults' two checks per shape, load and mode (goodput within
10% of the tuned run's; never clearly below single where single meets both SLOs), each able to fail."""
import json
import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import serve_variants  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))

PER = 64


def mode(goodput, met):
    """A mode's figures: `met` requests of each repetition's 64 meet both SLOs."""
    rep = {"slo_attainment": met / PER, "ttft_slo_violation": 1 - met / PER, "tpot_slo_violation": 0.0,
           "goodput_rps": goodput}
    return dict(rep, reps=[rep] * 3)


def run(single, slo_aware, tpot_first, trace="trace_short.csv"):
    """A serve JSON with one load; each argument is (goodput, requests met per repetition)."""
    modes = {"single": mode(*single), "slo_aware": mode(*slo_aware), "tpot_first": mode(*tpot_first)}
    return {"commit": "abc1234", "slo": {"ttft_ms": 40.0, "tpot_ms": 4.5},
            "workload": {"trace": trace, "capacity_rps": 300.0, "repetitions": 3, "requests_per_run": PER},
            "loads": [{"load": 0.2, "modes": modes}]}


def write(folder, name, d):
    (folder / name).write_text(json.dumps(d))


def test_defaults_that_match_the_tuned_run_and_single_pass(tmp_path, capsys):
    write(tmp_path, "serve_variant_short_default.json", run((60.0, 64), (61.0, 63), (59.0, 64)))
    write(tmp_path, "serve_variant_short_tuned.json", run((60.0, 64), (62.0, 64), (60.0, 64)))
    write(tmp_path, "serve_variant_default.json", run((5.0, 30), (7.0, 45), (6.5, 44), trace="code.csv"))
    write(tmp_path, "serve_variant_tuned.json", run((5.0, 30), (7.1, 45), (6.6, 44), trace="code.csv"))
    assert serve_variants.main([str(tmp_path), "--check"]) == 0
    out = capsys.readouterr().out
    assert out.index("### code") < out.index("### short"), "the code trace first"
    assert "| 0.2 | slo_aware | 2% / 0% / 61.00 | 0% / 0% / 62.00 | 0.98 | 189/192" in out
    assert "not clearly below (goodput 1.02x)" in out
    assert "single misses; goodput 1.40x" in out
    assert out.rstrip().endswith("Checks: all hold.")


def test_a_default_far_from_the_tuned_run_fails(tmp_path, capsys):
    write(tmp_path, "serve_variant_short_default.json", run((5.0, 30), (5.0, 40), (7.0, 45)))
    write(tmp_path, "serve_variant_short_tuned.json", run((5.0, 30), (7.0, 45), (7.0, 45)))
    assert serve_variants.main([str(tmp_path)]) == 0, "without --check it only reports"
    assert serve_variants.main([str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "0.71 (fails)" in out
    assert "short 0.2 slo_aware: goodput 0.71x the tuned run's" in out


def test_clearly_below_a_single_that_meets_both_slos_fails(tmp_path, capsys):
    # single meets on 192 of 192; tpot_first on 165 of 192: the intervals are apart
    write(tmp_path, "serve_variant_short_default.json", run((60.0, 64), (60.0, 63), (52.0, 55)))
    write(tmp_path, "serve_variant_short_tuned.json", run((60.0, 64), (60.0, 63), (52.0, 55)))
    assert serve_variants.main([str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "clearly below (goodput 0.87x)" in out
    assert "short 0.2 tpot_first: clearly below single, which meets both SLOs" in out
    assert "short 0.2 slo_aware" not in out.split("Checks:")[1], "189 of 192 is not clearly below 192 of 192"


def test_a_folder_without_both_variants_is_refused(tmp_path, capsys):
    write(tmp_path, "serve_variant_short_default.json", run((60.0, 64), (60.0, 63), (52.0, 55)))
    assert serve_variants.main([str(tmp_path)]) == 1
    assert "no shape" in capsys.readouterr().err


def torch_mode(goodput, met, per=32):
    """serve_torch's figures of one mode at one load: `met` of each repetition's `per` requests meet both."""
    rep = {"requests": per, "slo_attainment": met / per, "ttft_slo_violation": 1 - met / per,
           "tpot_slo_violation": 0.0, "goodput_rps": goodput}
    return dict({k: {"median": v, "min": v, "max": v} for k, v in rep.items()}, reps=[rep] * 3)


def torch_run(single, slo_aware, tpot_first, colocated_load=None):
    """A serve_torch JSON with loads 0.2 and 0.4 (each argument: (goodput, met per repetition)), plus
    pdmux_static and, where given, a load that only the base run has."""
    loads = ["0.2", "0.4"] + ([colocated_load] if colocated_load else [])
    res = {m: {l: torch_mode(*v) for l in loads} for m, v in
           (("single", single), ("pdmux_static", single), ("slo_aware", slo_aware), ("tpot_first", tpot_first))}
    return {"commit": "abc1234", "trace": "data/traces/azure_llm_2023_code.csv", "slo": {"ttft_ms": 187.0,
            "tpot_ms": 11.0}, "capacity_rps": {"median": 28.9}, "config": {"reps": 3, "requests": 32},
            "results": res}


def test_torch_reads_serve_torch_and_its_tuned_run(tmp_path, capsys):
    # serve_torch.json also holds the co-located load (0.3 here), which the tuned run lacks
    write(tmp_path, "serve_torch.json", torch_run((5.0, 28), (6.0, 31), (6.2, 32), colocated_load="0.3"))
    write(tmp_path, "serve_torch_tuned.json", torch_run((5.1, 28), (6.1, 31), (6.1, 32)))
    assert serve_variants.main(["--torch", str(tmp_path), "--check"]) == 0
    out = capsys.readouterr().out
    assert "| 0.2 | slo_aware | 3% / 0% / 6.00 | 3% / 0% / 6.10 | 0.98 | 93/96" in out
    assert "| 0.4 | tpot_first |" in out and "| 0.3 |" not in out
    assert "capacity 28.90 requests/s; 3 repetitions of 32 requests" in out
    assert out.rstrip().endswith("Checks: all hold.")


def test_torch_default_far_below_its_tuned_run_fails(tmp_path, capsys):
    write(tmp_path, "serve_torch.json", torch_run((5.0, 28), (4.0, 20), (6.2, 32)))
    write(tmp_path, "serve_torch_tuned.json", torch_run((5.0, 28), (6.0, 31), (6.1, 32)))
    assert serve_variants.main(["--torch", str(tmp_path), "--check"]) == 1
    assert "code 0.4 slo_aware: goodput 0.67x the tuned run's" in capsys.readouterr().out


def test_torch_trace_shapes_are_judged_each_against_its_own_tuned_run(tmp_path, capsys):
    """serve-torch-variants with DS_SERVE_TORCH_SHAPE writes serve_torch_<shape>.json and
    serve_torch_<shape>_tuned.json: each shape is its own table and its own checks, beside the code
    trace's; a run of another name (serve_torch_idlebe_debug.json) is no variant."""
    write(tmp_path, "serve_torch.json", torch_run((5.0, 28), (6.0, 31), (6.2, 32)))
    write(tmp_path, "serve_torch_tuned.json", torch_run((5.1, 28), (6.1, 31), (6.1, 32)))
    lo = torch_run((5.0, 28), (4.0, 20), (6.2, 32))
    lo["trace"] = "trace_long-outputs.csv"
    write(tmp_path, "serve_torch_long-outputs.json", lo)
    write(tmp_path, "serve_torch_long-outputs_tuned.json", torch_run((5.0, 28), (6.0, 31), (6.1, 32)))
    write(tmp_path, "serve_torch_idlebe_debug.json", torch_run((0.1, 1), (0.1, 1), (0.1, 1)))
    assert serve_variants.main(["--torch", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "### code (Azure code trace)" in out and "### long-outputs (trace_long-outputs.csv)" in out
    assert out.index("### code") < out.index("### long-outputs")
    assert "long-outputs 0.4 slo_aware: goodput 0.67x the tuned run's" in out
    assert "code 0.4" not in out.split("Checks:")[1], "the code trace's runs pass"


def test_torch_without_the_tuned_run_is_refused(tmp_path, capsys):
    write(tmp_path, "serve_torch.json", torch_run((5.0, 28), (6.0, 31), (6.2, 32)))
    assert serve_variants.main(["--torch", str(tmp_path)]) == 1
    assert "serve_torch.json and serve_torch_tuned.json" in capsys.readouterr().err

"""bench/dsbench plot-results draws the main job's one-load colocate.json
(build/colocate.json from tools/main.sh), not only colocate --sweep files."""
import json
import sys

import pytest
from conftest import REPO_ROOT

# bench/ on the path only for this import: left there, its torch/ folder
# would shadow PyTorch for the tests collected after this one
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import plot_arrivals, plot_results  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))

MAIN_JOB = {
    "benchmark": "colocate", "device": "Simulated GPU (132 SMs)", "simulated": True, "sms": 132,
    "driver": "sim", "commit": "x", "date": "d", "ls_load": 0.2, "target": 0.99,
    "configs": {
        "ls_alone": {"ls_p99_norm": 1.0, "be_tput_norm": None},
        "priority": {"ls_p99_norm": 900.0, "be_tput_norm": 0.9},
        "static": {"ls_p99_norm": 1.3, "be_tput_norm": 0.6},
        "slo_aware": {"ls_p99_norm": 1.4, "be_tput_norm": 0.62},
    },
}


def test_a_one_load_run_becomes_a_sweep_of_that_load():
    s = plot_results.as_sweep(MAIN_JOB)
    assert list(s["sweep"]) == ["0.20"]
    assert s["sweep"]["0.20"]["slo_aware"]["ls_p99_norm"] == 1.4
    assert s["verdict"] == {}
    sweep = {"sweep": {"0.20": {}}, "configs": {"x": {}}}
    assert plot_results.as_sweep(sweep) is sweep  # a sweep stays as it is


def test_plot_results_draws_the_main_jobs_json(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "colocate.json"
    path.write_text(json.dumps(MAIN_JOB))
    assert plot_results.main(["--colocate", str(path), "--outdir", str(tmp_path / "out")]) == 0
    png = tmp_path / "out" / "colocate.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_and_colocate_together_are_refused():
    with pytest.raises(SystemExit):
        plot_results.main(["--sweep", "a.json", "--colocate", "b.json"])


def _arrivals(loads, tpot):
    rng = lambda x: {"median": x, "min": x, "max": x}  # noqa: E731
    summary = {"slo_aware": {"tpot_p99_norm": rng(tpot), "be_norm": rng(0.6)}, "ls_alone": {}, "be_alone": {}}
    return {"benchmark": "colocate_arrivals", "device": "d", "driver": "x", "commit": "c", "segment_us": 1000,
            "reps": 3, "pairs": {"llama3+resnet50": {"loads": {ld: {"rate_rps": 1.0, "summary": summary}
                                                               for ld in loads}}}}


def test_plot_arrivals_merges_the_loads_of_several_files(tmp_path):
    a, b = _arrivals(["0.2"], 1.1), _arrivals(["0.1", "0.3", "0.2"], 1.5)
    m = plot_arrivals.merge([a, _arrivals([], 1.0), b])
    loads = m["pairs"]["llama3+resnet50"]["loads"]
    assert sorted(loads) == ["0.1", "0.2", "0.3"]
    assert loads["0.2"]["summary"]["slo_aware"]["tpot_p99_norm"]["median"] == 1.5  # the later file's load
    assert m["commit"] == "c" and a["pairs"]["llama3+resnet50"]["loads"].keys() == {"0.2"}  # inputs untouched
    pytest.importorskip("matplotlib")
    for i, d in enumerate((_arrivals(["0.2"], 1.1), _arrivals(["0.1", "0.5"], 1.4))):
        (tmp_path / f"{i}.json").write_text(json.dumps(d))
    assert plot_arrivals.main([str(tmp_path / "0.json"), str(tmp_path / "1.json"), "--out-dir",
                               str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "colocate_arrivals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


"""bench/dsbench headline: one table per benchmark with a column per device
(docs/results/h100/ and docs/results/h200/ only), each cell linking its file,
"not run" where a device has none."""
import json
import sys

from conftest import REPO_ROOT

# bench/ on the path only for this import: left there, its torch/ folder
# would shadow PyTorch for the tests collected after this one
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import headline  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))


def overhead(device, ratio):
    return {"device": device, "driver": "580", "launch_ratio": ratio, "launch_added_ns": 90.0, "remap_us": 0.4,
            "gate_us_host": 8.0, "gate_us_rck": 13.0}


def test_each_device_reads_its_own_folder_only_and_a_missing_device_is_not_run(tmp_path, monkeypatch):
    assert headline.DEVICES == [("H100", ["h100"]), ("H200", ["h200"])]
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "overhead.json").write_text(json.dumps(overhead("H100 80GB", 1.022)))
    # a file at the top level belongs to no device: not a column's
    (tmp_path / "overhead.json").write_text(json.dumps(overhead("H200 (top level)", 1.039)))
    monkeypatch.setattr(headline, "RESULTS", str(tmp_path))
    found = headline.find("overhead.json")
    assert found["H100"][0] == "h100/overhead.json" and "H200" not in found
    rows = headline.table(["x"], [(["ratio"], None)], found, lambda d, _: "%.3fx" % d["launch_ratio"])
    assert rows[2].startswith("| ratio | [1.022x]") and rows[2].endswith("| not run |")
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "overhead.json").write_text(json.dumps(overhead("H200 (folder)", 1.05)))
    found = headline.find("overhead.json")
    assert found["H200"] == ("h200/overhead.json", json.loads((tmp_path / "h200" / "overhead.json").read_text()))
    rows = headline.table(["x"], [(["ratio"], None)], found, lambda d, _: "%.3fx" % d["launch_ratio"])
    assert rows[0] == "| x | H100 | H200 |"
    folder = "docs/results/"  # (the folders of this made-up tree, not of the repository's)
    assert rows[2] == "| ratio | [1.022x](%sh100/overhead.json) | [1.050x](%sh200/overhead.json) |" % (folder, folder)
    del found["H100"]
    rows = headline.table(["x"], [(["ratio"], None)], found, lambda d, _: "%.3fx" % d["launch_ratio"])
    assert rows[2].startswith("| ratio | not run | [1.050x]")
    assert headline.origins({}) == "no run yet"


def test_a_serve_result_says_whether_its_policy_flags_were_set_by_hand():
    tuned = {"command": "serve --device cuda --requests 64 --ls-sms 32 --tpot-ls-sms 192 --be-window-us 20000"}
    assert headline.tuning(tuned) == \
        "policy flags set by hand: `--ls-sms 32 --tpot-ls-sms 192 --be-window-us 20000`"
    assert headline.tuning({"command": "serve --device cuda --requests 64 --loads 0.2,0.3"}) == \
        "policies at their defaults"

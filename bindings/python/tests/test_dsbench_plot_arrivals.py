"""bench/dsbench plot-arrivals: several colocate_arrivals files drawn as one
(their pairs and loads merged, every file's commit in the caption)."""
import sys

from conftest import REPO_ROOT

# bench/ on the path only for this import: left there, its torch/ folder
# would shadow PyTorch for the tests collected after this one
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import plot_arrivals  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))


def result(commit, pair, loads):
    return {"device": "H100", "commit": commit,
            "pairs": {pair: {"loads": {ld: {"summary": {"ls_alone": {}}, "rate_rps": 1.0} for ld in loads}}}}


def test_merge_keeps_every_pair_and_load_and_names_every_commit_once():
    d = plot_arrivals.merge([result("aaa1111", "llama3+resnet50", ["0.1", "0.3"]),
                             result("bbb2222", "llama3+resnet50", ["0.2"]),
                             result("bbb2222", "llama3+bert_large", ["0.2"])])
    assert sorted(d["pairs"]["llama3+resnet50"]["loads"]) == ["0.1", "0.2", "0.3"]
    assert sorted(d["pairs"]["llama3+bert_large"]["loads"]) == ["0.2"]
    assert d["commit"] == "aaa1111, bbb2222"


def test_a_later_file_replaces_an_earlier_files_load():
    first, second = result("aaa1111", "p", ["0.2"]), result("bbb2222", "p", ["0.2"])
    second["pairs"]["p"]["loads"]["0.2"]["rate_rps"] = 2.0
    d = plot_arrivals.merge([first, second])
    assert d["pairs"]["p"]["loads"]["0.2"]["rate_rps"] == 2.0

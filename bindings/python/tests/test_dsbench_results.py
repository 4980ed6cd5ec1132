"""bench/dsbench results-readme and strip-paths: the generated pages of
docs/results (an index, a README per device folder with its notes appended)
and a results folder without machine paths."""
import json
import sys

from conftest import REPO_ROOT

# bench/ on the path only for this import (its torch/ folder would shadow PyTorch)
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import results_readme, strip_paths  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))


def overhead(device, commit):
    return {"device": device, "driver": "580", "commit": commit, "date": "2026-12-06",
            "command": "./build-gpu/bench/overhead/overhead --device cuda --out overhead.json",
            "launch_ratio": 1.02, "launch_added_ns": 90.0, "remap_us": 0.4}


def made_up_results(tmp_path):
    root = tmp_path / "results"
    for sub, dev, commit in (("h100", "NVIDIA H100 80GB HBM3", "aaaaaaa"), ("h200", "NVIDIA H200", "bbbbbbb")):
        (root / sub).mkdir(parents=True)
        (root / sub / "overhead.json").write_text(json.dumps(overhead(dev, commit)))
        (root / sub / "overhead.log").write_text("== bench overhead\n")
    (root / "h200" / results_readme.NOTES).write_text("## Reading these results\n\nHand-written.\n")
    (root / "h100" / "segments").mkdir()
    (root / "h100" / "segments" / "README.md").write_text("# Graph segments on an H100\n\ntext\n")
    return root


def test_results_readme_writes_an_index_and_a_page_per_device_and_check_says_when_one_is_stale(tmp_path, capsys):
    root = made_up_results(tmp_path)
    assert results_readme.main(["--check", str(root)]) == 1  # nothing written yet
    assert results_readme.main([str(root)]) == 0
    index = (root / "README.md").read_text()
    assert "| H100 | [h100/](h100/README.md) | NVIDIA H100 80GB HBM3 | `aaaaaaa` |" in index
    assert "| H200 | [h200/](h200/README.md) | NVIDIA H200 | `bbbbbbb` |" in index
    assert "- [h100/segments/](h100/segments/README.md): Graph segments on an H100" in index
    assert ("bash tools/gpu-run.sh --out docs/results/<device> overhead colocate sweep pairs determinism memory "
            "stress serve") in index
    h100, h200 = (root / "h100" / "README.md").read_text(), (root / "h200" / "README.md").read_text()
    assert h100.startswith("# Results on the NVIDIA H100 80GB HBM3 (h100/)")
    assert "## W4 overhead (overhead.json)" in h100 and "commit `aaaaaaa`" in h100
    assert "- [overhead.log](overhead.log): the output of the run that wrote overhead.json" in h100
    assert "- [segments/](segments/README.md): Graph segments on an H100" in h100
    assert h200.rstrip().endswith("## Reading these results\n\nHand-written.")  # the notes, appended
    assert "verdict history" not in h100 + h200 + index
    assert results_readme.main(["--check", str(root)]) == 0
    (root / "h200" / results_readme.NOTES).write_text("## Reading these results\n\nEdited.\n")
    assert results_readme.main(["--check", str(root)]) == 1
    assert "h200/README.md differs from the files" in capsys.readouterr().err
    assert results_readme.main(["--check", str(tmp_path / "none")]) == 2


def test_strip_paths_leaves_commands_relative_to_the_folder_and_the_tree(tmp_path, capsys):
    out = tmp_path / "gpu-results"
    out.mkdir()
    cmd = "./build-gpu/bench/serve/serve --trace /src/tree/traces/t.csv --out %s/serve.json" % out
    (out / "serve.json").write_text(json.dumps({"command": cmd}))
    (out / "serve.log").write_text("trace: /src/tree/traces/t.csv\nwrote %s/serve_timeline.png\n" % out)
    (out / "plot.png").write_bytes(b"\x89PNG %s/x" % str(out).encode())
    assert strip_paths.main([str(out), "/src/tree"]) == 0
    assert json.loads((out / "serve.json").read_text())["command"] == \
        "./build-gpu/bench/serve/serve --trace traces/t.csv --out serve.json"
    assert (out / "serve.log").read_text() == "trace: traces/t.csv\nwrote serve_timeline.png\n"
    assert (out / "plot.png").read_bytes().endswith(str(out).encode() + b"/x")  # not text: left alone
    assert "strip-paths: serve.json" in capsys.readouterr().out
    # the folder inside the root: its own prefix goes first, whole
    assert strip_paths.strip("/r/docs/results/h100/x.json /r/traces/t", ["/r", "/r/docs/results/h100"]) == \
        "x.json traces/t"
    assert strip_paths.main([str(out), "relative/root"]) == 2
    assert strip_paths.main([str(tmp_path / "none")]) == 2


def test_strip_paths_turns_the_folder_named_whole_into_a_dot(tmp_path):
    out = tmp_path / "r1"
    out.mkdir()
    cmd = "python3 serve_torch.py --out %s --requests 32" % out
    (out / "serve_torch.json").write_text(json.dumps({"command": cmd, "dir": "%s/" % out, "other": "%s2/x" % out}))
    (out / "run.log").write_text("OK  -> %s\nOK  -> %s/serve_torch.json\n" % (out, out))
    assert strip_paths.main([str(out)]) == 0
    d = json.loads((out / "serve_torch.json").read_text())
    assert d["command"] == "python3 serve_torch.py --out . --requests 32"
    assert d["dir"] == "."
    assert d["other"] == "%s2/x" % out  # a longer name that starts with the folder's is not the folder
    assert (out / "run.log").read_text() == "OK  -> .\nOK  -> serve_torch.json\n"

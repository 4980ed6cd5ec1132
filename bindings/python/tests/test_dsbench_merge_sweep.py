"""bench/dsbench merge-sweep: a W1 sweep run in parts (one fixed SLO) becomes
one sweep file whose every load keeps its own part's figures; parts that
disagree (SLO, commit, configurations) or repeat a load are refused."""
import copy
import json
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import merge_sweep  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))

SWEEP = REPO_ROOT / "docs" / "results" / "h200" / "colocate_sweep.json"


def part(whole, loads, command):
    """The sweep file a run of only `loads` would have written."""
    d = copy.deepcopy(whole)
    d.pop("merged_from", None)
    for key in merge_sweep.PER_LOAD:
        d[key] = {k: v for k, v in whole[key].items() if k in loads}
    d["command"] = command
    return d


def write(tmp_path, name, d):
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return str(p)


def test_parts_merge_into_the_sweep_they_were_cut_from(tmp_path):
    whole = json.loads(SWEEP.read_text())
    loads = list(whole["sweep"])
    low, high = part(whole, loads[:2], "colocate --sweep low"), part(whole, loads[2:], "colocate --sweep high")
    out = tmp_path / "merged.json"
    # parts in any order: the merged file lists loads in increasing order
    assert merge_sweep.main(["--out", str(out), write(tmp_path, "high.json", high),
                             write(tmp_path, "low.json", low)]) == 0
    merged = json.loads(out.read_text())
    for key in merge_sweep.PER_LOAD:
        assert merged[key] == whole[key]
        assert list(merged[key]) == loads
    assert merged["ls_slo_us"] == whole["ls_slo_us"]
    assert [m["loads"] for m in merged["merged_from"]] == [loads[2:], loads[:2]]
    assert [m["file"] for m in merged["merged_from"]] == ["high.json", "low.json"]  # no machine path
    assert merged["command"] == "colocate --sweep high ; colocate --sweep low"


def test_parts_that_disagree_or_repeat_a_load_are_refused(tmp_path, capsys):
    whole = json.loads(SWEEP.read_text())
    loads = list(whole["sweep"])
    a = write(tmp_path, "a.json", part(whole, loads[:3], "a"))
    other_slo = part(whole, loads[3:], "b")
    other_slo["ls_slo_us"] += 1
    out = str(tmp_path / "m.json")
    assert merge_sweep.main(["--out", out, a, write(tmp_path, "b.json", other_slo)]) == 1
    assert "differ in ls_slo_us" in capsys.readouterr().err
    assert merge_sweep.main(["--out", out, a, write(tmp_path, "c.json", part(whole, loads[2:], "c"))]) == 1
    assert "load %s is in both" % loads[2] in capsys.readouterr().err
    fewer = part(whole, loads[3:], "d")
    for load in fewer["sweep"]:
        del fewer["sweep"][load]["static@16"]
    assert merge_sweep.main(["--out", out, a, write(tmp_path, "d.json", fewer)]) == 1
    assert "different configurations" in capsys.readouterr().err
    with pytest.raises(ValueError):
        merge_sweep.merge([])


def test_newer_parts_replace_loads_of_a_merged_sweep_across_commits(tmp_path, capsys):
    """Updating a merged sweep: --replace takes a later part's load over an
    earlier one's; parts from another commit need --across-commits, and the
    merged file then names every commit and which loads each gave."""
    whole = json.loads(SWEEP.read_text())
    loads = list(whole["sweep"])
    old = write(tmp_path, "old.json", part(whole, loads[:3], "colocate --sweep old"))
    out = tmp_path / "first.json"
    assert merge_sweep.main(["--out", str(out), old]) == 0
    newer = part(whole, loads[2:], "colocate --sweep newer")
    newer["commit"] = "abc1234"
    newer["date"] = "2099-01-01T00:00:00Z"
    for load in newer["verdict"]:
        newer["verdict"][load] = {"marker": load}  # tells which part a load came from
    new = write(tmp_path, "newer.json", newer)
    dst = str(tmp_path / "m.json")
    assert merge_sweep.main(["--out", dst, "--replace", str(out), new]) == 1
    assert "differ in commit" in capsys.readouterr().err
    assert merge_sweep.main(["--out", dst, "--across-commits", str(out), new]) == 1
    assert "load %s is in both" % loads[2] in capsys.readouterr().err
    assert merge_sweep.main(["--out", dst, "--replace", "--across-commits", str(out), new]) == 0
    m = json.loads(open(dst).read())
    assert list(m["sweep"]) == loads
    assert m["verdict"][loads[1]] == whole["verdict"][loads[1]]
    assert all(m["verdict"][load] == {"marker": load} for load in loads[2:]), "the newer part's loads win"
    assert [(e["file"], e["loads"], e["commit"]) for e in m["merged_from"]] == [
        ("old.json", loads[:2], whole["commit"]), ("newer.json", loads[2:], "abc1234")]
    assert m["commit"] == "%s, abc1234" % whole["commit"]
    assert m["command"] == "colocate --sweep old ; colocate --sweep newer"
    assert m["date"] == "2099-01-01T00:00:00Z"

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

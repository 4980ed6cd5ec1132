"""bench/dsbench/sizing.py, the ctypes wrapper of libdssizing (src/policy/sizing.c, slo_aware's sizing rule):
the same decisions as tests/test_sizing.c for the same requests, and clear errors. Run by the test
dsbench_sizing (bench/meson.build), which sets DS_SIZING_LIBRARY to the library it built; skipped without it."""
import os
import sys

import pytest
from conftest import REPO_ROOT, run_python

# bench/ on the path only for this import (its torch/ folder would shadow PyTorch)
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import sizing  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))

needs_library = pytest.mark.skipif(not os.environ.get(sizing.ENV),
                                   reason=f"{sizing.ENV} unset: run by the meson test dsbench_sizing")


class Feed:
    """tests/test_sizing.c's feed: one request a millisecond, a late one its own run."""

    def __init__(self, start, **fields):
        self.z = sizing.Sizing([32, 64, 96], start, **fields)
        self.req = self.over = 0
        self.now = 0.0
        assert self.z.step(1, 0, 0, 0.0, 0.5) == ("start", start)
        self.req = 1

    def one(self, late=0, p99_share=0.5):
        self.req += 1
        self.over += late
        self.now += 1000.0
        return self.z.step(self.req, self.over, self.over, self.now, p99_share)


@needs_library
def test_the_defaults_are_the_policys():
    cfg = sizing.default_config()
    assert (cfg.target, cfg.shrink_requests, cfg.dwell_us, cfg.request_window) == (0.99, 128, 20000.0, 256)
    assert (cfg.probe_fail_sd, cfg.probe_hold, cfg.probe_max, cfg.cap_sd, cfg.descent) == (2.0, 2, 4, 2.0, 1)
    assert (cfg.held_long, cfg.forget_within_sd, cfg.overload_stay) == (4.0, -1.0, 2)


@needs_library
def test_an_overdrawn_budget_steps_up_as_in_the_c_test():
    f = Feed(1)
    assert all(f.one() == ("stay", 1) for _ in range(24))
    kinds = [f.one(1) for _ in range(6)]
    assert kinds[:5] == [("stay", 1)] * 5 and kinds[5] == ("up", 2)
    assert f.z.level == 2


@needs_library
def test_a_rule_variant_is_a_config_field():
    """--probe-fail-sd: with 3 SDs, the probe that fails at 4 lates of 13 with 2 SDs does not."""
    for sd, want in ((2.0, "up"), (3.0, "stay")):
        f = Feed(2, dwell_us=0.0, probe_fail_sd=sd)
        for _ in range(131):
            f.one(p99_share=0.7)
        assert f.one(p99_share=0.7) == ("down", 1)
        for _ in range(10):
            f.one()
        assert [f.one(1)[0] for _ in range(4)][-1] == want, sd


@needs_library
def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="no sizing parameter"):
        sizing.Sizing([32, 64], 0, probe_fail=2.0)
    with pytest.raises(ValueError, match="a ladder of"):
        sizing.Sizing([], 0)


def test_a_missing_library_is_named_with_the_way_to_get_it(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from dsbench import sizing\n"
            "try:\n    sizing.default_config()\n"
            "except sizing.SizingLibraryError as e:\n    print('ERR', e)\n") % str(REPO_ROOT / "bench")
    r = run_python(code, env={sizing.ENV: str(tmp_path / "nope.so")})
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and sizing.ENV in r.stdout and "nope.so" in r.stdout

"""Shared fixtures: the package from this source tree, runtimes on the
simulated device, and a helper to run a snippet in a fresh interpreter (for
what the library reads once per process, such as DS_LIBCUDA)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence

import pytest

PKG_ROOT = Path(__file__).resolve().parents[1]  # bindings/python
REPO_ROOT = PKG_ROOT.parents[1]
sys.path.insert(0, str(PKG_ROOT))

import detshare  # noqa: E402


@pytest.fixture
def rt() -> Iterator[detshare.Runtime]:
    """A runtime on a fresh simulated device (virtual time, 132 SMs), with the
    scheduler driven by the test (ds_runtime_poll) so runs are exact."""
    with detshare.Runtime("sim", scheduler_period_us=-1) as r:
        yield r


def make_rt(policy: Optional[str] = None, **kw: object) -> detshare.Runtime:
    kw.setdefault("scheduler_period_us", -1)
    kw.setdefault("ls_sms", 64)
    return detshare.Runtime("sim", policy=policy, **kw)  # type: ignore[arg-type]


def run_python(code: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter with this package importable; env
    entries are added to (or, with value None, removed from) os.environ."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(PKG_ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def cuda_include() -> Optional[Path]:
    """Folder with cuda.h (meson passes DETSHARE_CUDA_INCLUDE)."""
    for root in (os.environ.get("DETSHARE_CUDA_INCLUDE"), os.environ.get("CUDA_ROOT", "/usr/local/cuda") + "/include",
                 "/usr/local/cuda/include"):
        if root and (Path(root) / "cuda.h").is_file():
            return Path(root)
    return None


def compile_shared(tmp: Path, source: Path, name: str, defines: Sequence[str] = ()) -> Path:
    """Builds `source` into tmp/lib<name>.so with the system C compiler against
    the repository's headers; skips the test if there is no compiler or cuda.h."""
    cc = shutil.which("cc") or shutil.which("gcc")
    inc = cuda_include()
    if cc is None or inc is None:
        pytest.skip("no C compiler or cuda.h to build a test helper with")
    out = tmp / f"lib{name}.so"
    cmd = [cc, "-std=c11", "-shared", "-fPIC", "-O1", f"-I{REPO_ROOT / 'include'}", f"-I{inc}",
           *[f"-D{d}" for d in defines], str(source), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def native_policy(tmp_path_factory) -> ctypes.CDLL:
    """native_policy.c (beside this file), compiled and loaded."""
    path = compile_shared(tmp_path_factory.mktemp("policy"), Path(__file__).with_name("native_policy.c"), "dstestpolicy")
    return ctypes.CDLL(str(path))


@pytest.fixture(scope="session")
def fake_drivers(tmp_path_factory) -> Dict[str, Path]:
    """Stand-in libcuda.so.1 builds of tests/fake_libcuda.c (the C suite's):
    'old' reports CUDA 11.8, 'nodev' 13.0 with no device."""
    tmp = tmp_path_factory.mktemp("fakecuda")
    src = REPO_ROOT / "tests" / "fake_libcuda.c"
    return {
        "old": compile_shared(tmp, src, "fakecuda_old", ["FAKE_VERSION=11080"]),
        "nodev": compile_shared(tmp, src, "fakecuda_nodev", ["FAKE_VERSION=13000"]),
    }

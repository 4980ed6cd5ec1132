"""The ctypes structs have the C layout: sizes recorded from the compiler,
and, where a C compiler and cuda.h are at hand, every field's offset and the
struct's size compiled from the headers."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from detshare import _types as T

from conftest import REPO_ROOT

STRUCTS = [getattr(T, name) for name in T.EXPECTED_SIZES]


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda c: c.__name__)
def test_recorded_sizes(cls):
    assert ctypes.sizeof(cls) == T.EXPECTED_SIZES[cls.__name__]


def _cuda_include() -> Path | None:
    for root in (os.environ.get("DETSHARE_CUDA_INCLUDE"), os.environ.get("CUDA_ROOT", "") + "/include",
                 "/usr/local/cuda/include"):
        if root and (Path(root) / "cuda.h").is_file():
            return Path(root)
    return None


def test_layout_matches_the_headers(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    inc = _cuda_include()
    if cc is None or inc is None:
        pytest.skip("no C compiler or cuda.h to compile the headers with")
    lines = []
    expected = []
    for cls in STRUCTS:
        name = cls.__name__
        lines.append(f'printf("%zu\\n", sizeof({name}));')
        expected.append(ctypes.sizeof(cls))
        for fname, _ in cls._fields_:
            lines.append(f'printf("%zu\\n", offsetof({name}, {fname}));')
            expected.append(getattr(cls, fname).offset)
    src = tmp_path / "layout.c"
    src.write_text(
        "#include <stdio.h>\n#include <stddef.h>\n#include <detshare/detshare.h>\n"
        "#include <detshare/policy.h>\n#include <detshare/sim.h>\n"
        "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", f"-I{REPO_ROOT / 'include'}", f"-I{inc}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert got == expected


def test_init_values_match_the_init_macros():
    a = T.ds_vctx_attr()
    assert (a.size, a.magic, a.version, a.cls, a.weight, a.initial_pctx) == (72, T.DS_ABI_MAGIC, 1, 0, 1, -1)
    assert (a.group, a.group_ranks, a.group_rank, a.group_flags) == (None, 0, 0, 0)  # no group
    assert T.ds_vctx_attr.group.offset == T.DS_VCTX_ATTR_SIZE_V1
    s = T.ds_sim_config()
    assert (s.sm_count, s.min_partition_sms, s.sm_alignment, s.time_scale, s.trace_capacity) == (132, 8, 8, 1.0, 65536)
    k = T.ds_sim_kernel_desc()
    assert (k.block_us, k.blocks_per_sm) == (10.0, 1)

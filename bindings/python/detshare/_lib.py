"""Finding and loading libdetshare, and the prototypes of its functions.

Search order (the first hit wins):

1. ``$DETSHARE_LIBRARY``: a path to the shared object (or to a folder that
   holds ``libdetshare.so``). If it is set but wrong, that is an error: the
   binding never silently loads a different library than the one named.
2. ``pkg-config --variable=libdir detshare``: an installed library.
3. The build tree of the repository this package sits in:
   ``<repo>/build*/src/libdetshare.so`` (``build`` first, then the others by
   name).
4. The dynamic linker, asked for ``libdetshare.so.0`` as a C program linked
   with ``-ldetshare`` would be: the folders of ``$LD_LIBRARY_PATH``, the
   ``ldconfig`` cache, ``/lib`` and ``/usr/lib``. Only :func:`lib` takes this
   step (it loads the library to learn where it is); :func:`find_library`
   stops after the third.

The library is loaded on first use (importing :mod:`detshare` loads nothing).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import List, Optional, Tuple

from . import _types as T

ENV_VAR = "DETSHARE_LIBRARY"
_SONAMES = ("libdetshare.so", "libdetshare.so.0")


class LibraryNotFoundError(OSError):
    """libdetshare could not be found or loaded; ``places`` lists every place
    looked at, with what was found there."""

    def __init__(self, places: List[Tuple[str, str]]) -> None:
        self.places = places
        lines = "\n".join(f"  - {where}: {what}" for where, what in places)
        super().__init__(
            "libdetshare not found. Looked at:\n"
            + lines
            + "\nBuild it (ninja -C build), install it (meson install, then ldconfig; or LD_LIBRARY_PATH"
            + f" set to the installed lib folder), or set {ENV_VAR} to the path of libdetshare.so."
        )


def repo_root() -> Path:
    """The repository root when this package runs from its source tree
    (bindings/python/detshare/ -> three levels up)."""
    return Path(__file__).resolve().parents[3]


def _in_dir(d: Path) -> Optional[Path]:
    for name in _SONAMES:
        p = d / name
        if p.is_file():
            return p
    return None


def _from_env(places: List[Tuple[str, str]]) -> Optional[Path]:
    v = os.environ.get(ENV_VAR)
    if v is None or v == "":
        places.append((f"${ENV_VAR}", "not set"))
        return None
    p = Path(v)
    if p.is_dir():
        hit = _in_dir(p)
        if hit:
            return hit
        places.append((f"${ENV_VAR}={v}", f"a folder without {' or '.join(_SONAMES)}"))
    elif p.is_file():
        return p
    else:
        places.append((f"${ENV_VAR}={v}", "no such file"))
    raise LibraryNotFoundError(places)


def _from_pkg_config(places: List[Tuple[str, str]]) -> Optional[Path]:
    exe = shutil.which("pkg-config")
    if exe is None:
        places.append(("pkg-config detshare", "pkg-config is not installed"))
        return None
    try:
        r = subprocess.run(
            [exe, "--variable=libdir", "detshare"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        places.append(("pkg-config detshare", f"failed to run: {e}"))
        return None
    libdir = r.stdout.strip()
    if r.returncode != 0 or not libdir:
        places.append(("pkg-config detshare", "no detshare.pc on PKG_CONFIG_PATH"))
        return None
    hit = _in_dir(Path(libdir))
    if hit is None:
        places.append((f"pkg-config detshare libdir {libdir}", f"no {_SONAMES[0]} there"))
    return hit


def _from_build_tree(places: List[Tuple[str, str]]) -> Optional[Path]:
    root = repo_root()
    pattern = str(root / "build*" / "src" / "libdetshare.so")
    if not (root / "meson.build").is_file():
        places.append((pattern, "this package is not inside the libdetshare source tree"))
        return None
    builds = sorted(root.glob("build*/src/libdetshare.so"), key=lambda p: (p.parts[-3] != "build", p.parts[-3]))
    if builds:
        return builds[0]
    places.append((pattern, "no build (run: ninja -C build)"))
    return None


def find_library() -> Path:
    """Path of the libdetshare shared object, searched in steps 1-3 of the
    documented order (:func:`lib` then asks the dynamic linker).

    :raises LibraryNotFoundError: naming every place looked at.
    """
    places: List[Tuple[str, str]] = []
    for finder in (_from_env, _from_pkg_config, _from_build_tree):
        hit = finder(places)
        if hit is not None:
            return hit
    raise LibraryNotFoundError(places)


def _prototypes(lib: ctypes.CDLL) -> None:
    S = T.ds_status_t
    P = POINTER

    def fn(name: str, restype, *argtypes) -> None:  # type: ignore[no-untyped-def]
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    # detshare.h
    fn("ds_status_string", c_char_p, c_int)
    fn("ds_status_name", c_char_p, c_int)
    fn("ds_last_error_message", c_char_p)
    fn("ds_version", c_int)
    fn("ds_log_set_handler", S, T.DS_LOG_FN, c_void_p, c_int)
    fn("ds_runtime_create", S, P(T.ds_runtime_config), P(T.ds_runtime_t))
    fn("ds_runtime_destroy", S, T.ds_runtime_t)
    fn("ds_runtime_info_get", S, T.ds_runtime_t, P(T.ds_runtime_info))
    fn("ds_pctx_probe_sms", S, T.ds_runtime_t, c_uint32, P(c_uint64), P(c_uint32))
    fn("ds_vctx_create", S, T.ds_runtime_t, P(T.ds_vctx_attr), P(T.ds_vctx_t))
    fn("ds_vctx_destroy", S, T.ds_vctx_t)
    fn(
        "ds_launch",
        S,
        T.ds_vctx_t,
        T.CUfunction,
        T.ds_dim3,
        T.ds_dim3,
        c_uint32,
        P(c_void_p),
        P(T.ds_launch_hints),
    )
    fn("ds_vctx_acquire_stream", S, T.ds_vctx_t, P(T.CUstream))
    fn("ds_vctx_release_stream", S, T.ds_vctx_t)
    fn("ds_vctx_remap", S, T.ds_vctx_t, c_uint32)
    fn("ds_vctx_get_pctx", S, T.ds_vctx_t, P(c_uint32))
    fn("ds_vctx_synchronize", S, T.ds_vctx_t)
    fn("ds_vctx_get_stats", S, T.ds_vctx_t, P(T.ds_vctx_stats))
    fn("ds_vctx_request_begin", S, T.ds_vctx_t, P(T.ds_request_t))
    fn("ds_vctx_request_end", S, T.ds_vctx_t, T.ds_request_t, P(c_double))
    fn("ds_vctx_request_record", S, T.ds_vctx_t, c_double)
    fn("ds_runtime_get_stats", S, T.ds_runtime_t, P(T.ds_runtime_stats))
    fn("ds_vctx_get_name", S, T.ds_vctx_t, P(c_char_p))
    fn("ds_graph_create", S, T.ds_vctx_t, T.DS_GRAPH_CAPTURE_FN, c_void_p, P(T.ds_graph_attr), P(T.ds_graph_t))
    fn("ds_graph_from_cuda_graph", S, T.ds_vctx_t, T.CUgraph, P(T.ds_graph_attr), P(T.ds_graph_t))
    fn("ds_graph_launch", S, T.ds_vctx_t, T.ds_graph_t)
    fn("ds_graph_destroy", S, T.ds_graph_t)
    fn("ds_graph_get_stats", S, T.ds_graph_t, P(T.ds_graph_stats))
    fn("ds_graph_cut", S, T.CUstream)
    fn("ds_graph_from_cuda_graphs", S, T.ds_vctx_t, P(T.CUgraph), c_uint32, P(T.ds_graph_attr), P(T.ds_graph_t))
    fn("ds_graph_get_segment", S, T.ds_graph_t, c_uint32, P(T.ds_graph_segment))
    # policy.h
    fn("ds_policy_register", S, T.ds_runtime_t, P(T.ds_policy_ops), c_void_p)
    fn("ds_runtime_set_policy", S, T.ds_runtime_t, c_char_p)
    fn("ds_runtime_get_policy", S, T.ds_runtime_t, P(c_char_p))
    fn("ds_policy_param_set", S, T.ds_runtime_t, c_char_p, c_char_p, c_char_p)
    fn("ds_policy_param_get", S, T.ds_runtime_t, c_char_p, c_char_p, P(c_double))
    fn("ds_runtime_poll", S, T.ds_runtime_t)
    fn("ds_vctx_set_urgent", S, T.ds_vctx_t, c_int)
    fn("ds_vctx_set_window", S, T.ds_vctx_t, c_uint32)
    fn("ds_vctx_set_gate_interval", S, T.ds_vctx_t, c_uint32)
    fn("ds_vctx_gate_close", S, T.ds_vctx_t)
    fn("ds_vctx_gate_open", S, T.ds_vctx_t)
    # sim.h
    fn("ds_sim_kernel_create", S, T.ds_runtime_t, P(T.ds_sim_kernel_desc), P(T.CUfunction))
    fn(
        "ds_sim_launch_on_stream",
        S,
        T.ds_runtime_t,
        T.CUstream,
        T.CUfunction,
        T.ds_dim3,
        T.ds_dim3,
        P(c_void_p),
    )
    fn("ds_sim_now_us", S, T.ds_runtime_t, P(c_double))
    fn("ds_sim_sleep_until", S, T.ds_runtime_t, c_double)
    fn("ds_sim_trace_get", S, T.ds_runtime_t, P(T.ds_sim_kernel_record), c_size_t, P(c_size_t))
    fn("ds_sim_trace_clear", S, T.ds_runtime_t)


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[Path] = None


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]


def _loaded_from(handle: ctypes.CDLL, fallback: str) -> Path:
    """The file the dynamic linker loaded ``handle`` from (dladdr on one of its
    functions), or ``fallback`` if that cannot be told."""
    for libc in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(libc).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
        dladdr.restype = c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(handle.ds_version, c_void_p), ctypes.byref(info)) and info.dli_fname:
            return Path(os.fsdecode(info.dli_fname))
    return Path(fallback)


def _from_dynamic_linker(places: List[Tuple[str, str]]) -> Tuple[ctypes.CDLL, Path]:
    soname = _SONAMES[1]
    try:
        handle = ctypes.CDLL(soname)
    except OSError as e:
        places.append((f"the dynamic linker ({soname}: $LD_LIBRARY_PATH, the ldconfig cache, /lib, /usr/lib)", str(e)))
        raise LibraryNotFoundError(places) from None
    return handle, _loaded_from(handle, soname)


def lib() -> ctypes.CDLL:
    """The loaded library (loaded and prototyped on first call; thread-safe)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            try:
                path = find_library()
            except LibraryNotFoundError as e:
                if os.environ.get(ENV_VAR):
                    raise  # named but wrong: never load another library
                handle, path = _from_dynamic_linker(e.places)
            else:
                try:
                    handle = ctypes.CDLL(str(path))
                except OSError as e:
                    raise LibraryNotFoundError([(str(path), f"found but dlopen failed: {e}")]) from e
            _prototypes(handle)
            _path = path
            _lib = handle
    return _lib


def library_path() -> Path:
    """Path of the loaded library (loads it if needed)."""
    lib()
    assert _path is not None
    return _path

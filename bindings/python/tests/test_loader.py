"""Finding the library: $DETSHARE_LIBRARY, then pkg-config, then the build
tree, with an error that names every place looked at."""

from __future__ import annotations

import shutil

import pytest

from detshare import _lib
from detshare._lib import LibraryNotFoundError, find_library

from conftest import REPO_ROOT, run_python


def test_env_var_file_and_folder(monkeypatch):
    path = _lib.library_path()
    monkeypatch.setenv("DETSHARE_LIBRARY", str(path))
    assert find_library() == path
    monkeypatch.setenv("DETSHARE_LIBRARY", str(path.parent))
    assert find_library().parent == path.parent


def test_env_var_pointing_nowhere_is_an_error_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DETSHARE_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(LibraryNotFoundError) as ei:
        find_library()
    assert str(tmp_path / "nope.so") in str(ei.value)
    monkeypatch.setenv("DETSHARE_LIBRARY", str(tmp_path))
    with pytest.raises(LibraryNotFoundError, match="folder without"):
        find_library()


def test_error_names_every_place(monkeypatch, tmp_path):
    monkeypatch.delenv("DETSHARE_LIBRARY", raising=False)
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))
    monkeypatch.setattr(_lib, "repo_root", lambda: tmp_path)
    with pytest.raises(LibraryNotFoundError) as ei:
        find_library()
    text = str(ei.value)
    assert "$DETSHARE_LIBRARY" in text and "not set" in text
    assert "pkg-config" in text
    assert str(tmp_path / "build*" / "src" / "libdetshare.so") in text
    assert len(ei.value.places) == 3


def test_build_tree_fallback(monkeypatch, tmp_path):
    monkeypatch.delenv("DETSHARE_LIBRARY", raising=False)
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))
    fake = tmp_path / "repo"
    (fake / "build-b" / "src").mkdir(parents=True)
    (fake / "build" / "src").mkdir(parents=True)
    (fake / "meson.build").write_text("")
    (fake / "build-b" / "src" / "libdetshare.so").write_bytes(b"")
    monkeypatch.setattr(_lib, "repo_root", lambda: fake)
    assert find_library() == fake / "build-b" / "src" / "libdetshare.so"
    (fake / "build" / "src" / "libdetshare.so").write_bytes(b"")
    assert find_library() == fake / "build" / "src" / "libdetshare.so", "build/ first"


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config not installed")
def test_pkg_config(monkeypatch, tmp_path):
    monkeypatch.delenv("DETSHARE_LIBRARY", raising=False)
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libdetshare.so.0").symlink_to(_lib.library_path().resolve())
    (tmp_path / "detshare.pc").write_text(
        f"prefix={tmp_path}\nlibdir={libdir}\n\nName: detshare\nDescription: x\nVersion: 0.1.0\nLibs: -L${{libdir}} -ldetshare\n"
    )
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setattr(_lib, "repo_root", lambda: tmp_path / "elsewhere")
    assert find_library() == libdir / "libdetshare.so.0"


def test_import_loads_nothing_and_a_bad_path_fails_on_first_use(tmp_path):
    code = (
        "import detshare, sys\n"
        "from detshare import _lib\n"
        "assert _lib._lib is None\n"
        "try:\n"
        "    detshare.Runtime('sim')\n"
        "except detshare.LibraryNotFoundError as e:\n"
        "    print(e)\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    r = run_python(code, {"DETSHARE_LIBRARY": str(tmp_path / "missing.so")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(tmp_path / "missing.so") in r.stdout


def test_repo_root_is_this_checkout():
    assert _lib.repo_root() == REPO_ROOT
    assert (REPO_ROOT / "include" / "detshare" / "detshare.h").is_file()

"""Finding and loading the small C libraries the Python tools call through
ctypes (libdsverdict, libdssizing): one implementation of each rule, in C."""
import ctypes
import os
from pathlib import Path


def find(env, name, subdir, error):
    """The library's path: $`env`, else build/`subdir`/`name` of this repository; raises `error` (an
    exception class) naming both when neither holds it."""
    given = os.environ.get(env)
    if given:
        if not os.path.isfile(given):
            raise error(f"{env}={given}: no such file")
        return given
    built = Path(__file__).resolve().parents[2] / "build" / subdir / name
    if built.is_file():
        return str(built)
    raise error(f"{name} not found: set {env} to its path, or build it in {built.parent.parent} "
                "(meson setup build && ninja -C build)")


def load(env, name, subdir, error):
    """(path, ctypes.CDLL) of the library `find` gives; `error` where it cannot be loaded."""
    path = find(env, name, subdir, error)
    try:
        return path, ctypes.CDLL(path)
    except OSError as e:
        raise error(f"{path}: cannot load: {e}") from None

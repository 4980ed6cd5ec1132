"""The command line: `python3 bench/dsbench COMMAND [ARGS]`, or
`PYTHONPATH=bench python3 -m dsbench COMMAND [ARGS]` (the commands: dsbench/__init__.py)."""
import os
import sys

if not __package__:
    # Run as a folder or a file (python3 bench/dsbench): sys.path[0] is this folder. Import the package
    # from the folder above it instead, so that its modules are dsbench.* and none is importable bare.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from dsbench import main  # noqa: E402

sys.exit(main(sys.argv[1:]))

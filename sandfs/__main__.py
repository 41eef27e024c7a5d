"""`sandfs` (the console script) and `python -m sandfs`."""

import atexit
import contextlib
import os
import sys

from sandfs.runtime import numpy_environment

numpy_environment()  # before anything imports numpy

from sandfs.cli import main as run_command  # noqa: E402


def main() -> int:
    """Run the command, then leave without the interpreter's teardown: once the command has
    answered, unloading numpy, av, trio and the rest only delays the caller: 70 ms here, most
    of the time between the daemon serving and `sandfs mount` returning. The exit handlers
    still run (logs flushed, worker processes stopped); only the modules are not unloaded."""
    code = run_command()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # a reader that left (`sandfs plan --json | head`) is no error
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

"""`python -m ringleader.launch.fail_fast SCRIPT.py ARGS...` (or `-m MODULE ARGS...`): run the
user's script as `__main__`; when it fails (an uncaught exception, or a non-zero exit), end
the process at once with its code, without the interpreter's exit handlers.

For MXNet parameter-server workers: MXNet's exit handler finalizes ps-lite, which waits for
every other worker, and they wait for this one's next push, so a failing worker never ended
and the job hung. This does for them what `python -m mpi4py` (MPI_Abort) does for MPI ranks.
A script that succeeds exits normally, finalizing with the others. Standard library only: it
starts in every worker.
"""

import os
import runpy
import sys
import traceback


def exit_code(error: SystemExit) -> int:
    """What the interpreter would exit with for this SystemExit (it prints a message)."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code & 0xFF
    print(error.code, file=sys.stderr)
    return 1


def main() -> None:
    arguments = sys.argv[1:]
    if not arguments or (arguments[0] == "-m" and len(arguments) < 2):
        sys.exit("usage: python -m ringleader.launch.fail_fast SCRIPT.py|-m MODULE [ARGS...]")
    try:
        if arguments[0] == "-m":
            sys.argv = [arguments[1], *arguments[2:]]
            runpy.run_module(arguments[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = arguments
            sys.path[0] = os.path.dirname(os.path.abspath(arguments[0]))  # as `python SCRIPT`
            runpy.run_path(arguments[0], run_name="__main__")
        code = 0
    except SystemExit as error:
        code = exit_code(error)
    except BaseException:
        traceback.print_exc()
        code = 1
    if code != 0:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    sys.exit(0)


if __name__ == "__main__":
    main()

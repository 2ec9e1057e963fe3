"""ringleader's stack registration, run at startup by every Python of a rank's process tree.

The rank wrapper puts this file's directory first on the user command's PYTHONPATH
(ringleader.rank.stacks.stack_environment), so every interpreter the rank starts, at any depth,
imports it as `sitecustomize`. With RINGLEADER_STACK_DIR and RINGLEADER_STACK_SIGNAL set, it
makes faulthandler dump every thread's Python stack to `<dir>/<pid>.txt` on that signal: the
wrapper's way to take a hung rank's stacks when py-spy cannot attach (no ptrace rights). The
dump is written by faulthandler's C signal handler, so it works while the main thread is
blocked in C (an MPI or gloo collective). Then the interpreter's own sitecustomize, if there is
one further down sys.path (Debian ships one), runs as it would without us.

Self-contained and Python 3.6+: the user's interpreter may be any, without ringleader installed.
Nothing here may break the user's program: every failure of ours only skips the registration.
"""

import _thread
import io
import os
import sys

TYPE_CHECKING = False  # typing itself would load modules into every rank's interpreter
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec, PathFinder
    from types import ModuleType

    Loader = Callable[[ModuleSpec], ModuleType]

# The first word of each registration file; ringleader.rank.stacks reads the line it starts.
HEADER = "ringleader-stacks"


class _Registration:
    """This process's faulthandler registration, redone in a forked child for its own PID."""

    def __init__(self, directory: str, signum: int) -> None:
        self.directory = directory
        self.signum = signum
        self.files: list[io.TextIOWrapper] = []

    def register(self) -> None:
        try:
            self._register()
        except Exception:  # never into the user's program: no registration, no dump, that's all
            return

    def _register(self) -> None:
        import faulthandler

        pid = os.getpid()
        os.makedirs(self.directory, exist_ok=True)
        # The header lets the wrapper check that this file belongs to the process that now has
        # this PID (same start time), not to an earlier one: the signal kills a process that
        # does not handle it. Open for the process's life (faulthandler writes to it): no `with`.
        stream = open(os.path.join(self.directory, f"{pid}.txt"), "w")  # noqa: SIM115
        version = ".".join(str(part) for part in sys.version_info[:3])
        stream.write(f"{HEADER} pid={pid} start={_start_ticks()} signal={self.signum} ")
        stream.write(f"python={version}\n")
        stream.flush()
        faulthandler.register(self.signum, file=stream, all_threads=True, chain=False)
        # faulthandler keeps only the descriptor's number: the file object must stay alive.
        inherited, self.files = self.files, [stream]
        for old in inherited:  # the parent's, copied by fork: this process no longer dumps to it
            old.close()


def _start_ticks() -> str:
    """Field 22 of /proc/self/stat: the process's start time, fixed for its whole life."""
    with open("/proc/self/stat") as stat:
        return stat.read().rpartition(")")[2].split()[19]


def _register_from_environment() -> None:
    try:
        directory = os.environ.get("RINGLEADER_STACK_DIR", "")
        signum = int(os.environ.get("RINGLEADER_STACK_SIGNAL", "0"))
        if not directory or signum <= 0:
            return
        registration = _Registration(directory, signum)
        registration.register()
        if hasattr(os, "register_at_fork"):  # 3.7+: a forked child (a DataLoader worker) too
            os.register_at_fork(after_in_child=registration.register)
    except Exception:
        return


def _note_exits_from_environment() -> None:
    """With RINGLEADER_EXIT_DIR set, the code this interpreter is about to exit with is written
    to `<dir>/<pid>` first: at `sys.exit` in the main thread, and when an exception ends the
    program. A stop that cuts the exit short (Horovod's shutdown at exit, during mpirun's
    abort) then leaves the code the program chose (ringleader.core.exitnote)."""
    try:
        directory = os.environ.get("RINGLEADER_EXIT_DIR", "")
        if not directory:
            return
        main_thread = _thread.get_ident()
        own_exit, own_hook = sys.exit, sys.excepthook

        def note(code: int) -> None:
            try:
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, str(os.getpid())), "w") as out:
                    out.write(str(code))
            except Exception:
                return

        def exit(status: "int | str | None" = None) -> None:
            if _thread.get_ident() == main_thread:  # elsewhere it ends a thread, not the program
                note(_exit_code(status))
            own_exit(status)

        def excepthook(kind: "type[BaseException]", value: BaseException, trace: object) -> None:
            note(1)
            own_hook(kind, value, trace)  # type: ignore[arg-type]

        sys.exit = exit  # type: ignore[assignment]
        sys.excepthook = excepthook
    except Exception:
        return


def _exit_code(status: object) -> int:
    """The process's exit code for `sys.exit(status)`, as the interpreter computes it."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF
    return 1  # anything else is printed, and the code is 1


def _import_system() -> "tuple[type[PathFinder], Loader]":
    """The import system's own PathFinder and module_from_spec.

    Taken from the modules every CPython has loaded before site.py runs: `importlib.util`
    would load 18 more modules into every interpreter of the rank, each paid for at its start
    and again at its exit (256 ranks ending at once on 2 cores: 0.11 s). Elsewhere, importlib."""
    try:
        finder = sys.modules["_frozen_importlib_external"].PathFinder
        return finder, sys.modules["_frozen_importlib"].module_from_spec
    except (KeyError, AttributeError):
        import importlib.machinery
        import importlib.util

        return importlib.machinery.PathFinder, importlib.util.module_from_spec


def _next_sitecustomize(finder: "type[PathFinder]") -> "ModuleSpec | None":
    """The spec of the sitecustomize `import` would have found without this directory."""
    try:
        here = os.path.dirname(os.path.realpath(__file__))
        path = [entry for entry in sys.path if os.path.realpath(entry) != here]
        return finder.find_spec("sitecustomize", path)
    except Exception:
        return None


def _chain() -> None:
    """Run the next sitecustomize as the module `sitecustomize`, as site.py would have.

    Its own errors are not caught here: site.py reports them exactly as it would without us."""
    finder, module_from_spec = _import_system()
    spec = _next_sitecustomize(finder)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    # importlib hands `import sitecustomize` whatever sys.modules holds once we return.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_register_from_environment()
_note_exits_from_environment()
_chain()

"""Installs what stdin lists into a venv on this host: `--bootstrap`'s remote half. Runs with
the host's own Python, which may lack ringleader: standard library only.

stdin has one line per item: `wheel<TAB>NAME<TAB>BASE64` (a wheel packed on the launching
machine, installed offline) or `index<TAB>REQUIREMENT` (what no wheel from there fits, e.g. a
compiled package built for another Python version: this host's pip gets it from its own
package index). The venv sees the packages of the Python that created it (a .pth file), so
only what is missing is shipped; the ssh commands try it first.
"""

import base64
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PIP = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def main(venv: Path) -> int:
    base_site = [p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
    with tempfile.TemporaryDirectory() as scratch:
        wheels, from_index = [], []
        for line in sys.stdin:
            kind, _, rest = line.rstrip("\n").partition("\t")
            if kind == "index":
                from_index.append(rest)
                continue
            name, _, data = rest.partition("\t")
            if kind != "wheel" or not name.endswith(".whl") or os.path.basename(name) != name:
                print(f"refusing item {kind!r} {name!r}", file=sys.stderr)
                return 2
            wheels.append(os.path.join(scratch, name))
            Path(wheels[-1]).write_bytes(base64.b64decode(data))
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        own = [p for p in base_site if not p.startswith(str(venv))]
        Path(site, "ringleader-base.pth").write_text("".join(f"{p}\n" for p in own))
        if from_index:
            # First, so that the offline wheels below are not undone by what pip resolves.
            done = subprocess.run([python, *PIP, *from_index], capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                version = "{}.{}".format(*sys.version_info[:2])
                print(
                    f"cannot install {' '.join(from_index)} for Python {version} from this "
                    "host's package index; install them for it by hand "
                    f"({sys.executable} -m pip install ...), or name another interpreter "
                    "with --python",
                    file=sys.stderr,
                )
                return 3
        subprocess.run(
            [python, *PIP, "--no-index", "--no-deps", "--force-reinstall", *wheels], check=True
        )
    indexed = f" and {len(from_index)} from the package index" if from_index else ""
    print(f"installed {len(wheels)} wheel(s){indexed} into {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).expanduser()))

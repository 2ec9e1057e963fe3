"""Installs the wheels on stdin (one `NAME<tab>BASE64` line each) into a venv on this host:
`--bootstrap`'s remote half. Runs with the host's own Python, which may lack ringleader:
standard library only.

The venv sees the packages of the Python that created it (a .pth file), so only what is missing
is shipped; it lives in ~/.ringleader/venv, which the ssh commands try first.
"""

import base64
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main(venv: Path) -> int:
    base_site = [p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
    with tempfile.TemporaryDirectory() as scratch:
        wheels = []
        for line in sys.stdin:
            name, _, data = line.rstrip("\n").partition("\t")
            if not name.endswith(".whl") or os.path.basename(name) != name:
                print(f"refusing wheel name {name!r}", file=sys.stderr)
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
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--force-reinstall",
                "--disable-pip-version-check",
                *wheels,
            ],
            check=True,
        )
    print(f"installed {len(wheels)} wheel(s) into {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).expanduser()))

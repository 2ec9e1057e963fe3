"""What happened to each archive, as log lines and as a note for the failure file."""

from dataclasses import dataclass
from pathlib import Path

from ringleader.artifacts.archive import Skipped
from ringleader.core.files import write_atomically

MAX_SKIPPED_SHOWN = 5


@dataclass(frozen=True)
class ArchiveResult:
    name: str  # output.tar.gz or model.tar.gz
    destination: str  # s3://bucket/prefix/<host>/<name> or /dir/<host>/<name>
    error: str | None = None  # None: delivered
    kept: Path | None = None  # the local archive left in place when delivery failed
    size: int | None = None  # bytes of the archive; None when it could not be built
    sha256: str | None = None  # of the archive
    files: int = 0  # files in its manifest
    attempts: int = 0
    skipped: tuple[Skipped, ...] = ()

    @property
    def delivered(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class DeliveryReport:
    uri: str  # as shown to the user (never with credentials)
    host: str
    results: tuple[ArchiveResult, ...]

    @property
    def ok(self) -> bool:
        return all(result.delivered for result in self.results)

    def summary_lines(self) -> list[str]:
        """One line per archive (plus skipped entries) for the job's log."""
        lines: list[str] = []
        for result in self.results:
            if result.delivered:
                tries = "" if result.attempts <= 1 else f" after {result.attempts} attempts"
                lines.append(
                    f"artifacts: {result.name} ({_count(result.files, 'file')}, "
                    f"{_size(result.size)}, sha256 {result.sha256}) -> "
                    f"{result.destination}{tries}"
                )
            else:
                kept = f"; kept at {result.kept}" if result.kept else ""
                lines.append(
                    f"artifacts: {result.name} NOT delivered to {result.destination}: "
                    f"{result.error}{kept}"
                )
            if result.skipped:
                shown = ", ".join(
                    f"{item.path} ({item.reason})" for item in result.skipped[:MAX_SKIPPED_SHOWN]
                )
                more = len(result.skipped) - MAX_SKIPPED_SHOWN
                tail = f" and {more} more" if more > 0 else ""
                lines.append(f"artifacts: {result.name} left out {shown}{tail}")
        return lines

    def failure_note(self) -> str:
        """A short paragraph for the failure file ("" when everything was delivered)."""
        by_error: dict[str, list[ArchiveResult]] = {}
        for result in self.results:
            if result.error is not None:
                by_error.setdefault(result.error, []).append(result)
        if not by_error:
            return ""
        sentences = []
        for error, failed in by_error.items():
            names = " and ".join(result.name for result in failed)
            kept = ", ".join(str(result.kept) for result in failed if result.kept)
            sentences.append(f"{names}: {error}." + (f" Kept at {kept}." if kept else ""))
        return (
            f"Artifacts of host {self.host} were not delivered to {self.uri} "
            f"(the job's exit code is unchanged). " + " ".join(sentences) + "\n"
        )


def append_note(failure_file: Path, note: str) -> bool:
    """Add `note` after what the failure file says, when the job failed; True when added.

    A job that succeeded has no failure file and gets none: a failure beside `success` would
    make the job look failed (the log has the note). The file is replaced atomically, so the
    job's own text always stays first.
    """
    if not note:
        return False
    try:
        before = failure_file.read_text(errors="replace")
    except FileNotFoundError:
        return False
    separator = "\n" if before and not before.endswith("\n") else ""
    write_atomically(failure_file, before + separator + note)
    return True


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"

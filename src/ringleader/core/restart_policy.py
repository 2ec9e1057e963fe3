"""ringleader_restart_on: which failures another attempt may cure.

The setting is a comma-separated list of causes and at most one exit-code filter:

    rank-failure          a rank exited non-zero or was killed by a signal
    hang                  no rank made progress for ringleader_hang_timeout
    lost-host             a host was lost mid-job (only `ringleader cluster run --spares` can
                          start the job again without it; in place nothing can)
    health                a host failed its health check (only `ringleader cluster run
                          --spares` can replace it)
    codes:137,139         a rank failure only with one of these codes
    not-codes:1,2         a rank failure except with one of these codes

A code filter alone implies rank-failure. The default, rank-failure,hang,lost-host,health,straggler,
restarts whatever a restart can cure. Pure: parsed into a RestartPolicy, asked by core/attempts.py.
"""

from dataclasses import dataclass

from ringleader.core.errors import ConfigError

FIELD = "ringleader_restart_on"
RANK_FAILURE = "rank-failure"
HANG = "hang"
LOST_HOST = "lost-host"
HEALTH = "health"
STRAGGLER = "straggler"
CAUSES = (RANK_FAILURE, HANG, LOST_HOST, HEALTH, STRAGGLER)
DEFAULT = ",".join(CAUSES)
CODES = "codes:"
NOT_CODES = "not-codes:"


@dataclass(frozen=True)
class RestartPolicy:
    causes: frozenset[str] = frozenset(CAUSES)
    codes: frozenset[int] | None = None  # codes: a rank failure is cured only with these
    not_codes: frozenset[int] = frozenset()  # not-codes: never with these

    def refuses(self, cause: str, code: int) -> str | None:
        """Why the policy allows no other attempt after a failure of this cause whose code
        (the root-cause rank's, for a rank failure) is `code`; None: it allows one."""
        if cause not in self.causes:
            return f"{FIELD} does not name {cause}"
        if cause != RANK_FAILURE:
            return None
        if self.codes is not None and code not in self.codes:
            return f"exit code {code} is not in {FIELD}'s {CODES}{_listed(self.codes)}"
        if code in self.not_codes:
            return f"exit code {code} is in {FIELD}'s {NOT_CODES}{_listed(self.not_codes)}"
        return None

    def describe(self) -> str:
        terms = [cause for cause in CAUSES if cause in self.causes]
        if self.codes is not None:
            terms.append(CODES + _listed(self.codes))
        if self.not_codes:
            terms.append(NOT_CODES + _listed(self.not_codes))
        return ",".join(terms)


DEFAULT_POLICY = RestartPolicy()


def _listed(codes: frozenset[int]) -> str:
    return ",".join(str(code) for code in sorted(codes))


def parse_restart_on(field: str, value: object) -> RestartPolicy:
    """The policy a ringleader_restart_on value names; ConfigError naming the term that is not
    a cause or a code filter."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field, f"expected causes and code filters, e.g. {DEFAULT}, got {value!r}")
    causes: set[str] = set()
    filters: dict[str, frozenset[int]] = {}
    for term in _terms(value):
        for prefix in (CODES, NOT_CODES):
            if term.startswith(prefix):
                if filters:
                    raise ConfigError(field, f"{term!r}: give one of {CODES} or {NOT_CODES}, once")
                filters[prefix] = _codes(field, term, term[len(prefix) :])
                break
        else:
            if term not in CAUSES:
                raise ConfigError(
                    field,
                    f"unknown cause {term!r}: expected {', '.join(CAUSES)}, "
                    f"{CODES}CODE,... or {NOT_CODES}CODE,...",
                )
            causes.add(term)
    if filters:
        causes.add(RANK_FAILURE)
    return RestartPolicy(
        causes=frozenset(causes),
        codes=filters.get(CODES),
        not_codes=filters.get(NOT_CODES, frozenset()),
    )


def _terms(value: str) -> list[str]:
    """The value's terms: `codes:137,139` keeps its commas, so a number after a code filter
    belongs to it."""
    terms: list[str] = []
    for part in (piece.strip() for piece in value.split(",")):
        if terms and terms[-1].startswith((CODES, NOT_CODES)) and part.isdigit():
            terms[-1] += "," + part
        else:
            terms.append(part)
    return terms


def _codes(field: str, term: str, listed: str) -> frozenset[int]:
    parts = listed.split(",")
    if not all(part.isdigit() and 0 < int(part) < 256 for part in parts):
        raise ConfigError(field, f"{term!r}: expected exit codes from 1 to 255, e.g. 137,139")
    return frozenset(int(part) for part in parts)

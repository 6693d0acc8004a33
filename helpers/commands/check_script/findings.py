"""One line of check-script's report (PASS, FAIL or NOT SEEN, with the fix or what would let it be seen) and the verdict of a report.

Three verdicts, each with its own exit status: `passed` (0) only when every check ran and
passed; `FAILED` (1) when any check failed; `incomplete` (3) when none failed but some check
could not see what it checks (2 stays the status of a usage error, as for every command).
"""

from __future__ import annotations

from dataclasses import dataclass

PASSED, FAILED, INCOMPLETE = 0, 1, 3  # exit statuses (2: a usage error, CourseError)


@dataclass
class Finding:
    status: str  # PASS, FAIL, NOT SEEN
    what: str
    detail: str
    fix: str = ""
    to_see: str = ""  # NOT SEEN: what would let the check see it (an option, a smaller script, a change)

    def lines(self) -> list[str]:
        out = [f"{self.status:<8} {self.what}: {self.detail}"]
        if self.fix:
            out.append(f"         fix: {self.fix}")
        if self.to_see:
            out.append(f"         to see it: {self.to_see}")
        return out


def verdict(findings: list[Finding]) -> tuple[int, str, str]:
    """(exit status, word, what it rests on) of a whole report: FAILED if anything failed;
    incomplete, naming the checks not seen and what would let them be seen, if anything was not
    seen (a FAIL elsewhere does not hide a NOT SEEN, and a NOT SEEN never passes); else passed."""
    failed = list(dict.fromkeys(f.what for f in findings if f.status == "FAIL"))
    if failed:
        return FAILED, "FAILED", f"failed: {', '.join(failed)}"
    unseen = [f for f in findings if f.status == "NOT SEEN"]
    if unseen:
        names = list(dict.fromkeys(f.what for f in unseen))
        hints = list(dict.fromkeys(f.to_see for f in unseen if f.to_see))
        return INCOMPLETE, "incomplete", (f"not seen: {', '.join(names)}"
                                          + (f"; to see them: {'; '.join(hints)}" if hints else ""))
    if not findings:
        return INCOMPLETE, "incomplete", "nothing was checked"
    return PASSED, "passed", "every check ran and passed"

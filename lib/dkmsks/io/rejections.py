"""What a load refuses, and why: the :class:`Reason` texts of a refused row, the
:class:`Rejection` that carries one with its file line, and the errors of an input that is
unusable as a whole (:class:`InputError`; :class:`AllRowsRejected`, which names the commonest
reasons).

The numpy readers (:mod:`dkmsks.io.formats`) and the Spark readers (:mod:`dkmsks.spark.readers`)
write these texts, so both give the same reason for the same line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: A rejected row keeps this many characters of its text.
TEXT_LIMIT = 500
#: A value quoted in a reason is cut to this many characters (then ``...``).
QUOTE_LIMIT = 60
#: Exit status of a job or command whose input is unusable as a whole: retrying cannot help
#: (the Airflow DAGs fail such a task at once instead of retrying it).
EXIT_INPUT_UNUSABLE = 2


class Reason:
    """Why a row is refused: printf templates shared by the numpy readers (``%``) and the
    Spark readers (``format_string``), so both write the same text for the same line.

    A quoted value is the field as read (surrounding spaces kept), cut by :func:`shorten`.
    """

    NOT_UTF8 = "line is not valid UTF-8 text"
    ONLY_SEPARATORS = "the line holds only separators or spaces, no values"
    COLUMN_COUNT = "wrong column count: expected %d, got %d"
    NOT_INTEGER = "%s '%s' is not an integer"
    BEYOND_INT64 = "%s '%s' is outside the int64 range"
    NOT_A_NUMBER = "%s '%s' is not a number"
    NOT_FINITE = "%s '%s' is not finite: coordinates must be finite numbers"
    OUTSIDE_BOUNDS = "%s '%s' is outside %s"
    KEYWORDS_EMPTY = "keywords are empty"
    EMPTY_TOKEN = "keywords '%s' contain an empty token (use single spaces)"
    KEYWORD_TOO_LONG = "keyword '%s' has %d characters, more than the limit of %d"
    NOT_NORMALISED = "keyword '%s' is not normalised (lower-case [a-z0-9] words joined by '_')"
    UNKNOWN_OP = "unknown op '%s'; valid ops: insert, delete"
    K_TOO_SMALL = "k is %d, it must be at least 1"
    K_TOO_LARGE = "k is %d, more than the limit of %d"
    DUPLICATE_ID = "duplicate object id %d (first seen on line %d)"
    ALREADY_INGESTED = "duplicate object id %d (already ingested from %s line %d)"
    LATE = "t=%d is already processed (last processed timestamp %d): a late row is never applied"
    DELETE_NOT_LIVE = "delete of subscription %d, which is not live at t=%d"
    INSERT_LIVE = "insert of subscription %d, which is already live"


def shorten(value: str) -> str:
    """``value`` as quoted in a reason: at most :data:`QUOTE_LIMIT` characters, then ``...``."""
    return value if len(value) <= QUOTE_LIMIT else value[:QUOTE_LIMIT] + "..."


#: Quoted values and numbers, masked by :func:`reason_kind` so that like reasons group.
QUOTED_VALUE_PATTERN = re.compile(r"'[^']*'")
NUMBER_PATTERN = re.compile(r"[0-9]+")


def reason_kind(reason: str) -> str:
    """The kind of a reason: quoted values and numbers masked (``x '...' is not a number``)."""
    return NUMBER_PATTERN.sub("N", QUOTED_VALUE_PATTERN.sub("'...'", reason))


# --------------------------------------------------------------------------- errors and rejected rows


class InputError(ValueError):
    """The input cannot be used at all (missing file, missing columns, unknown format)."""


class AllRowsRejected(InputError):
    """Every row of a non-empty input was refused; the message names the commonest reasons.

    ``commonest`` holds ``(rows, example line, example reason)`` per kind of reason
    (:func:`reason_kind`), most frequent first.
    """

    def __init__(self, path: str | Path, total: int, commonest: Sequence[tuple[int, int, str]],
                 *, note: str = "") -> None:
        self.total = total
        self.commonest = list(commonest)
        reasons = "; ".join(f"{rows:,} like line {line}: {reason}" for rows, line, reason in commonest)
        super().__init__(f"{path}: all {total:,} row(s) were rejected, nothing was loaded; "
                         f"commonest reasons: {reasons}" + (f"; {note}" if note else ""))


def truncated_gzip_error(path: str | Path) -> InputError:
    """The error for a gzip file that ends early."""
    return InputError(f"{path}: the gzip data ends early, the file is truncated (an interrupted copy or "
                      "download?); nothing was loaded: copy or compress the file again")


def corrupt_gzip_error(path: str | Path) -> InputError:
    """The error for a gzip file whose data does not decode."""
    return InputError(f"{path}: the gzip data is corrupt (a block or checksum does not decode); "
                      "nothing was loaded: copy or compress the file again")


@dataclass(frozen=True)
class Rejection:
    """One quarantined input row: where it was and why it was refused."""

    source: str
    line: int
    reason: str
    text: str

    def as_dict(self) -> dict[str, object]:
        """The rejection as a dict (the quarantine table's columns)."""
        return {"source": self.source, "line": self.line, "reason": self.reason, "text": self.text}


def commonest_reasons(rejections: Sequence[Rejection], top: int = 3) -> list[tuple[int, int, str]]:
    """``(rows, example line, example reason)`` of the ``top`` commonest kinds of reason,
    most frequent first (ties: earliest example first); the example is the kind's first line."""
    kinds: dict[str, list] = {}
    for r in sorted(rejections, key=lambda r: r.line):
        entry = kinds.setdefault(reason_kind(r.reason), [0, r.line, r.reason])
        entry[0] += 1
    ranked = sorted(kinds.values(), key=lambda e: (-e[0], e[1]))
    return [(rows, line, reason) for rows, line, reason in ranked[:top]]


def refuse_if_all_rejected(path: str | Path, accepted: int, rejections: Sequence[Rejection]) -> None:
    """Raise :class:`AllRowsRejected` when rows were read and none was accepted. A file
    without rows (a header only) is an empty batch and passes."""
    if accepted == 0 and rejections:
        raise AllRowsRejected(path, len(rejections), commonest_reasons(rejections))

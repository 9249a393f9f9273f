"""Errors as RFC 9457 problem details (``application/problem+json``), each naming the field.

Every refusal of the service is a :class:`Problem`: ``type`` (a ``urn:dkmsks:problem:...``
URI naming the kind), ``title``, ``status``, ``detail`` and, for a request whose fields are
wrong, ``errors``: one ``{pointer, field, detail}`` per field, ``pointer`` a JSON pointer into
the request body (RFC 6901, ``#/2/x`` for the ``x`` of a batch's third row). The field rules are
the readers' (:mod:`dkmsks.io.formats`): their reasons are passed on as they are, and
:func:`field_of` names the field each reason is about.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dkmsks.io.rejections import Reason

PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True)
class FieldError:
    """One wrong field of a request body."""

    pointer: str
    field: str
    detail: str

    def as_json(self) -> dict[str, str]:
        """As the problem's ``errors`` list holds it."""
        return {"pointer": self.pointer, "field": self.field, "detail": self.detail}


@dataclass
class Problem(Exception):
    """An HTTP error answered as problem details (module doc); ``headers`` go with it
    (``WWW-Authenticate``, ``Retry-After``)."""

    status: int
    kind: str
    title: str
    detail: str
    errors: Sequence[FieldError] = ()
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.title}: {self.detail}"

    def body(self, instance: str | None = None) -> dict[str, Any]:
        """The problem document."""
        doc: dict[str, Any] = {"type": f"urn:dkmsks:problem:{self.kind}", "title": self.title, "status": self.status,
                               "detail": self.detail}
        if instance:
            doc["instance"] = instance
        if self.errors:
            doc["errors"] = [e.as_json() for e in self.errors]
        return doc

    def encode(self, instance: str | None = None) -> bytes:
        """The problem document as JSON bytes."""
        return json.dumps(self.body(instance)).encode("utf-8")


def invalid(errors: Sequence[FieldError], detail: str | None = None) -> Problem:
    """422: the body is JSON of the right shape, but fields break the rules."""
    first = errors[0]
    return Problem(422, "invalid-field", "Invalid field",
                   detail or (f"{first.field}: {first.detail}" + (f" (and {len(errors) - 1} more)"
                                                                   if len(errors) > 1 else "")), errors)


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) into the body, as a URI fragment."""
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


# --------------------------------------------------------------------------- reasons -> fields

#: Reasons that name no field in their text, by the field they are about.
_REASON_FIELDS = {
    Reason.KEYWORDS_EMPTY: "keywords", Reason.EMPTY_TOKEN: "keywords", Reason.KEYWORD_TOO_LONG: "keywords",
    Reason.NOT_NORMALISED: "keywords", Reason.UNKNOWN_OP: "op", Reason.K_TOO_SMALL: "k", Reason.K_TOO_LARGE: "k",
    Reason.DUPLICATE_ID: "id", Reason.ALREADY_INGESTED: "id", Reason.LATE: "t", Reason.DELETE_NOT_LIVE: "id",
    Reason.INSERT_LIVE: "id", Reason.COLUMN_COUNT: "", Reason.NOT_UTF8: "", Reason.ONLY_SEPARATORS: "",
}
#: Templates whose first ``%s`` is the field's name (``x 'abc' is not a number``).
_NAMED = (Reason.NOT_INTEGER, Reason.BEYOND_INT64, Reason.NOT_A_NUMBER, Reason.NOT_FINITE, Reason.OUTSIDE_BOUNDS)


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(%[sd])", template)
    return re.compile("^" + "".join(".*?" if p in ("%s", "%d") else re.escape(p) for p in parts) + "$", re.S)


_MATCHERS = [(_pattern(t), f) for t, f in _REASON_FIELDS.items()]


def field_of(reason: str) -> str:
    """The field a reason of the readers' rules (:class:`~dkmsks.io.rejections.Reason`, or the
    landing's closed-timestamp refusal) is about; ``""`` for a reason about the whole row."""
    if reason.startswith("timestamp ") and " is closed" in reason:
        return "t"
    for template in _NAMED:
        name = template.split(" ", 1)[0]
        assert name == "%s"
        head = reason.split(" ", 1)[0]
        if _pattern(template).match(reason) and head in ("id", "x", "y", "t", "k"):
            return head
    for matcher, name in _MATCHERS:
        if matcher.match(reason):
            return name
    return ""

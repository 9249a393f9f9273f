"""Request bodies: JSON read and validated by the request schemas (:mod:`~dkmsks.service.schemas`),
each broken rule a problem naming its field (RFC 9457, :mod:`~dkmsks.service.problems`), and the
error responses the OpenAPI document lists for every route."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from dkmsks.service import schemas
from dkmsks.service.problems import PROBLEM_JSON, FieldError, Problem, field_of, invalid, pointer
from dkmsks.storage.landing import RefusedRows


def json_body(raw: bytes, content_type: str | None) -> Any:
    """The body as JSON: 415 for a content type that is not JSON, 400 for text that is not."""
    if content_type and "json" not in content_type.split(";")[0].lower():
        raise Problem(415, "unsupported-media-type", "Unsupported media type",
                      f"send the body as application/json, not {content_type.split(';')[0]}")
    try:
        return json.loads(raw)
    except ValueError as err:
        raise Problem(400, "malformed-json", "Malformed JSON", f"the body is not JSON: {err}") from None


def field_errors(err: ValidationError, prefix: tuple[str | int, ...] = ()) -> list[FieldError]:
    """Pydantic's errors as problem fields, each with its JSON pointer under ``prefix``."""
    out = []
    for e in err.errors(include_url=False):
        loc = (*prefix, *e["loc"])
        names = [p for p in loc if isinstance(p, str)]
        out.append(FieldError(pointer(*loc), names[-1] if names else "", e["msg"]))
    return out


def validated(adapter: TypeAdapter[Any], data: Any, prefix: tuple[str | int, ...] = ()) -> Any:
    """``data`` validated by ``adapter``, or a 422 problem naming every broken field."""
    try:
        return adapter.validate_python(data)
    except ValidationError as err:
        raise invalid(field_errors(err, prefix)) from None


def request_schema(model: type[BaseModel], *, batch: bool = False) -> dict[str, Any]:
    """An OpenAPI ``requestBody`` of ``model`` (``batch``: one or an array of them)."""
    schema = model.model_json_schema()
    if batch:
        schema = {"oneOf": [schema, {"type": "array", "items": schema, "maxItems": schemas.MAX_BATCH}]}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


SUBSCRIPTION = TypeAdapter(schemas.SubscriptionIn)
OBJECTS = TypeAdapter(list[schemas.ObjectIn])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ProblemDoc, "content": {PROBLEM_JSON: {}}, "description": text}
    for code, text in ((400, "malformed request"), (401, "no valid token"), (403, "the token lacks the scope"),
                       (404, "no such subscription (or another principal's)"), (413, "body too large"),
                       (422, "a field breaks a rule"), (429, "rate limited (Retry-After)"))}


def refusal(err: ValueError, *, status: int = 422) -> Problem:
    """A refusal of the readers' rules or of the landing protocol, naming its field."""
    reason = str(err.refused[0][1].reason) if isinstance(err, RefusedRows) and err.refused else str(err)
    name = field_of(reason)
    conflict = isinstance(err, RefusedRows) and name == "id"
    return invalid([FieldError(pointer(name) if name else "#", name, reason)]) if not conflict else Problem(
        409, "conflict", "Conflict", reason, [FieldError(pointer(name), name, reason)])

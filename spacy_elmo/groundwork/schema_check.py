"""The one way a file the package reads is checked against its format's schema
(:mod:`~spacy_elmo.bilm.file_formats`), and the one error a damaged file gives: a line naming the file, the field and
what to do.

:func:`read_json_file` reads a JSON file (its text, its JSON, its schema) and :func:`check_value` checks a value
already decoded (the JSON part of a safetensors header); both turn text that is not UTF-8, invalid JSON, JSON nested
too deeply and every schema violation (pydantic's ``ValidationError``: a wrong type, ``null``, NaN or infinity, a
number out of bounds, a list where an object belongs, a missing key) into one :class:`FileSchemaError`, e.g.
``.../metrics.json: stages[0].wall_time_s: input should be a valid number, not "x" (...)``. A reader that owns a
more specific error (a corpus's, a training file's) passes its class, a subclass of ValueError, so the command line
prints the line and exits 2 as for any bad input. The checked value is returned as it was decoded (a dict, ...),
its fields now of the types the schema declares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .excerpt import excerpt
from .file_names import PathLike

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import BaseModel, ValidationError
# pydantic is imported where a value is checked: reading options.json (JSON only, its own table) needs none


class FileSchemaError(ValueError):
    """A file whose content is not what its format says; the message names the file, the field and what to do."""


def read_json_file(
    path: PathLike, schema: Optional[type[BaseModel]], advice: str, error: type[ValueError] = FileSchemaError
) -> Any:
    """The JSON value in ``path``, checked against ``schema``; an ``error`` (one line: the file, the field,
    ``advice``) when the file is not UTF-8, not JSON or not what ``schema`` declares. ``schema`` None: the JSON only
    (for options.json, whose own table in :mod:`~spacy_elmo.bilm.weights` checks the value)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}): {advice}") from err
    return check_json_text(text, path, schema, advice, error)


def check_json_text(
    text: str,
    source: PathLike,
    schema: Optional[type[BaseModel]],
    advice: str,
    error: type[ValueError] = FileSchemaError,
) -> Any:
    """The JSON value in ``text`` (read from ``source``), checked as :func:`read_json_file` checks a file's."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{source}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}): {advice}") from err
    except (ValueError, RecursionError) as err:  # a number of more digits than Python converts; nesting too deep
        raise error(f"{source}: not JSON this package reads ({_first_line(err)}): {advice}") from err
    if schema is None:
        return value
    return check_value(value, source, schema, advice, error)


def check_value(
    value: Any, source: PathLike, schema: type[BaseModel], advice: str, error: type[ValueError] = FileSchemaError
) -> Any:
    """``value`` (decoded from ``source``) when ``schema`` accepts it, else an ``error`` naming ``source``, the first
    field at fault (``stages[0].wall_time_s``) and ``advice``."""
    from pydantic import ValidationError

    try:
        schema.model_validate(value)
    except ValidationError as err:
        raise error(f"{source}: {describe_problem(err)}: {advice}") from None
    except RecursionError as err:  # nesting deeper than the validator follows
        raise error(f"{source}: nested too deeply to be read: {advice}") from err
    return value


def describe_problem(err: ValidationError) -> str:
    """The first problem of ``err`` as ``field: what is wrong, not VALUE`` (``and N more`` when there are more)."""
    problems = err.errors(include_url=False)
    first = problems[0]
    where = field_path(first["loc"])
    message = re.sub(r" or instance of \w+", "", first["msg"][:1].lower() + first["msg"][1:])
    message = message.replace("valid dictionary", "JSON object").replace("valid list", "JSON list")
    if first["type"] == "missing":
        text = f"{where}: missing (a required key)"
    elif not where and not isinstance(first.get("input"), dict):
        text = f"the file holds {_json_type(first.get('input'))}, where a JSON object belongs"
    elif first["type"] == "value_error":  # a schema's own rule, its message naming the value
        text = f"{where + ': ' if where else ''}{message.removeprefix('value error, ')}"
    else:
        text = f"{where}: {message}, not {_shown(first.get('input'))}"
    more = len(problems) - 1
    return text + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def field_path(loc: tuple[Any, ...]) -> str:
    """``("stages", 0, "wall_time_s")`` as ``stages[0].wall_time_s``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _shown(value: Any) -> str:
    """A value as the file spells it (``null``, ``"many"``, ``[1, 2]``), bounded to a line."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return excerpt(value)
    return text if len(text) <= 60 else excerpt(text)


def _json_type(value: Any) -> str:
    """What a JSON value is, in JSON's words (``a list``, ``a number``)."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return f"{json.dumps(value)}"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


__all__ = ["FileSchemaError", "check_json_text", "check_value", "describe_problem", "field_path", "read_json_file"]

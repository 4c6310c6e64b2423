"""An MCP server asking the user, through Codex (`mcpServer/elicitation/request`, codex 0.171.0),
as a crew question; and the answer as the result the MCP server expects.

The request is a form (`mode: "form"`, `requestedSchema`: an object of simple fields), a URL to
open (`mode: "url"`), or a device verification crew cannot give. The result is
`{"action": "accept" | "decline" | "cancel", "content"?: {field: value}}`.

- A form with one field is asked as that field calls for: a choice of one (`enum`, `oneOf`) →
  need_selection of its labels, plus `decline`; a yes/no (`boolean`) → need_confirmation; text,
  a number or a choice of several → need_input. The answer is the field's value.
- A form with several fields is one need_input listing them, answered by a JSON object of field
  name (or title) → value; a form with none is a need_confirmation (a yes accepts).
- A URL is a need_confirmation naming it: a yes accepts (the person opens it).
- Every one of them takes `decline` or `cancel` as the answer that refuses the whole request. A
  value that is literally one of those words is given as a JSON object: `{"name": "decline"}`.
- An answer that does not fit (a word for a number, a required field left out) raises Unfit:
  the question is asked again, saying why, and nothing reaches the MCP server.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crew.adapters.wire import confirms
from crew.protocol import Contact
from crew.registry import ContactType

DECLINE = "decline"
CANCEL = "cancel"
#: Answers that say no to a boolean field (a yes is wire.YES).
_NO = frozenset({"n", "no", "false"})

#: Makes the MCP result from the answer (raises Unfit when it does not fit).
Reply = Callable[[str], dict[str, Any]]


class Unfit(ValueError):
    """An answer that does not fit the question: asked again, with this reason."""


@dataclass(frozen=True)
class _Field:
    """One field of a form: its name, what it takes, and how a person is told about it."""

    name: str
    kind: str  # string, number, integer, boolean, choice (one of options), choices (several)
    title: str
    description: str = ""
    required: bool = False
    #: (value, label) of a choice field.
    options: list[tuple[str, str]] = field(default_factory=list)
    bounds: dict[str, Any] = field(default_factory=dict)

    @property
    def labels(self) -> list[str]:
        return [label for _, label in self.options]

    def describe(self) -> str:
        """`port (integer, at least 1, required): the port to listen on`."""
        kind = f"one of {'|'.join(self.labels)}" if self.kind == "choice" else self.kind
        if self.kind == "choices":
            kind = f"any of {'|'.join(self.labels)}, as a JSON list"
        limits = [_BOUNDS[k].format(v) for k, v in self.bounds.items()]
        facts = ", ".join([kind, *limits, *(["required"] if self.required else [])])
        text = f"{self.name} ({facts})"
        about = self.description or (self.title if self.title != self.name else "")
        return f"{text}: {about}" if about else text

    def value(self, given: Any) -> Any:
        """The field's value from an answer (text, or a JSON value), or Unfit."""
        text = given if isinstance(given, str) else json.dumps(given)
        if self.kind == "boolean":
            if isinstance(given, bool):
                return given
            if confirms(text) or text.strip().lower() in _NO:
                return confirms(text)
            raise Unfit(f"{self.name} takes yes or no, not {text!r}")
        if self.kind in {"number", "integer"}:
            return self._number(given, text)
        if self.kind == "choice":
            return self._option(text)
        if self.kind == "choices":
            return self._options(given)
        return self._text(text)

    def _number(self, given: Any, text: str) -> int | float:
        try:
            number = float(given) if not isinstance(given, bool) else float("nan")
        except (TypeError, ValueError):
            raise Unfit(f"{self.name} takes a number, not {text!r}") from None
        if not math.isfinite(number):
            raise Unfit(f"{self.name} takes a number, not {text!r}")
        if self.kind == "integer":
            if not number.is_integer():
                raise Unfit(f"{self.name} takes a whole number, not {text!r}")
            number = int(number)
        low, high = self.bounds.get("minimum"), self.bounds.get("maximum")
        if (low is not None and number < low) or (high is not None and number > high):
            raise Unfit(f"{self.name} must be within {_range(low, high)}, not {text!r}")
        return number

    def _option(self, text: str) -> str:
        for value, label in self.options:
            if text.strip() in {value, label}:
                return value
        raise Unfit(f"{self.name} takes one of {', '.join(self.labels)}, not {text!r}")

    def _options(self, given: Any) -> list[str]:
        chosen = given if isinstance(given, list) else str(given).split(",")
        values = [self._option(str(c)) for c in chosen if str(c).strip()]
        low, high = self.bounds.get("minItems"), self.bounds.get("maxItems")
        if (low is not None and len(values) < low) or (high is not None and len(values) > high):
            raise Unfit(f"{self.name} takes {_range(low, high)} of its options")
        return values

    def _text(self, text: str) -> str:
        low, high = self.bounds.get("minLength"), self.bounds.get("maxLength")
        if (low is not None and len(text) < low) or (high is not None and len(text) > high):
            raise Unfit(f"{self.name} takes {_range(low, high)} characters, not {len(text)}")
        return text


#: The bounds a field may set, as a person reads them.
_BOUNDS = {
    "minimum": "at least {}",
    "maximum": "at most {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "minItems": "at least {} of them",
    "maxItems": "at most {} of them",
}


def _range(low: Any, high: Any) -> str:
    if low is not None and high is not None:
        return f"{low} to {high}"
    return f"at least {low}" if low is not None else f"at most {high}"


def elicitation(params: dict[str, Any]) -> tuple[Contact, Reply] | None:
    """The question an elicitation request asks, and how to make its result from the answer
    (None: crew cannot answer it, as a device verification, which needs a proof)."""
    mode = params.get("mode")
    asks = f"{params.get('serverName') or 'an MCP server'} (MCP) asks: {params.get('message')}"
    if mode == "url":
        url = str(params.get("url"))
        prompt = f"{asks} Open {url} — yes once you have (or {DECLINE}, {CANCEL})"
        return Contact(ContactType.NEED_CONFIRMATION, prompt), _confirmed
    schema = params.get("requestedSchema")
    if mode not in {"form", "openai/form", "openaiForm"} or not isinstance(schema, dict):
        return None
    fields = _fields(schema)
    if fields is None:
        return None
    if not fields:
        prompt = f"{asks} (yes accepts; or {DECLINE}, {CANCEL})"
        return Contact(ContactType.NEED_CONFIRMATION, prompt), _confirmed
    if len(fields) == 1:
        return _one(asks, fields[0])
    listed = "\n".join(f"- {f.describe()}" for f in fields)
    how = f"Answer with a JSON object of field → value, or {DECLINE} or {CANCEL}:"
    contact = Contact(ContactType.NEED_INPUT, f"{asks}\n{how}\n{listed}")
    return contact, lambda body: _form(fields, body, whole=False)


def _one(asks: str, only: _Field) -> tuple[Contact, Reply]:
    """A form of one field, asked as the field calls for."""
    reply: Reply = lambda body: _form([only], body, whole=True)  # noqa: E731  # the one form
    if only.kind == "choice":
        prompt = f"{asks} — {only.describe()}"
        return Contact(ContactType.NEED_SELECTION, prompt, [*only.labels, DECLINE]), reply
    kind = ContactType.NEED_CONFIRMATION if only.kind == "boolean" else ContactType.NEED_INPUT
    prompt = f"{asks} — {only.describe()} (or {DECLINE}, {CANCEL})"
    return Contact(kind, prompt), reply


def _fields(schema: dict[str, Any]) -> list[_Field] | None:
    """The fields of a requested schema (None: not a flat object of simple fields)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    required = set(schema.get("required") or [])
    fields = []
    for name, spec in properties.items():
        made = _field(str(name), spec, name in required) if isinstance(spec, dict) else None
        if made is None:
            return None
        fields.append(made)
    return fields


def _field(name: str, spec: dict[str, Any], required: bool) -> _Field | None:
    kind, title = spec.get("type"), str(spec.get("title") or name)
    about = str(spec.get("description") or "")
    bounds = {k: spec.get(k) for k in _BOUNDS if spec.get(k) is not None}
    options = _choices(spec)
    if kind == "array":
        items = spec.get("items")
        options = _choices(items if isinstance(items, dict) else {})
        return _Field(name, "choices", title, about, required, options, bounds)
    if options:
        return _Field(name, "choice", title, about, required, options)
    if kind in {"string", "number", "integer", "boolean"}:
        return _Field(name, str(kind), title, about, required, bounds=bounds)
    return None


def _choices(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(value, label) of each option: `enum` (with `enumNames`), or `oneOf`/`anyOf` of
    `{const, title}`."""
    titled = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(titled, list):
        return [(str(o.get("const")), str(o.get("title"))) for o in titled if isinstance(o, dict)]
    values = spec.get("enum")
    if not isinstance(values, list):
        return []
    names = spec.get("enumNames")
    labels = names if isinstance(names, list) and len(names) == len(values) else values
    return [(str(v), str(n)) for v, n in zip(values, labels, strict=True)]


def _refusal(body: str) -> dict[str, Any] | None:
    word = body.strip().lower()
    return {"action": word} if word in {DECLINE, CANCEL} else None


def _confirmed(body: str) -> dict[str, Any]:
    """A URL or an empty form: a yes accepts, anything else declines (`cancel` cancels)."""
    refused = _refusal(body)
    if refused is not None:
        return refused
    return {"action": "accept", "content": {}} if confirms(body) else {"action": DECLINE}


def _form(fields: list[_Field], body: str, *, whole: bool) -> dict[str, Any]:
    """The result of a form: from a JSON object naming its fields (by name or title), or, for a
    form of one field (`whole`), the answer as that field's value."""
    refused = _refusal(body)
    if refused is not None:
        return refused
    try:
        given = json.loads(body)
    except ValueError:
        given = None
    named = isinstance(given, dict) and any(f.name in given or f.title in given for f in fields)
    if not named:
        if not whole:
            raise Unfit("answer with a JSON object of field → value")
        given = {fields[0].name: body}
    assert isinstance(given, dict)
    content: dict[str, Any] = {}
    for each in fields:
        value = given.get(each.name, given.get(each.title))
        if value is None:
            if each.required:
                raise Unfit(f"{each.name} is required")
            continue
        content[each.name] = each.value(value)
    return {"action": "accept", "content": content}

"""Structured replies: valid JSON, JSON valid against a schema, JSON equal to an expected object."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from switchyard.evals.outcome import Outcome
from switchyard.evals.scorers.base import ScoringContext, Verdict, scorer
from switchyard.evals.scorers.normal_form import normalize

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


def parse_json_reply(reply: str) -> Any:
    """The JSON value of a reply, tolerating a ``` fence around it; raises ValueError if it is not JSON."""
    text = reply.strip()
    fenced = _FENCE.fullmatch(text)
    return json.loads(fenced.group(1) if fenced else text)


def json_matches(expected: Mapping[str, Any], reply: str) -> bool:
    """The quality gate's extraction rule: the reply is a JSON object equal to `expected` in normal form."""
    try:
        value = parse_json_reply(reply)
    except ValueError:
        return False
    return isinstance(value, dict) and normalize(value) == normalize(dict(expected))


@scorer("json_valid", "the reply is JSON (an object, unless `object` is false)", optional=("object",))
def json_valid(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    try:
        value = parse_json_reply(outcome.content)
    except ValueError as exc:
        return Verdict(False, detail=f"not JSON: {exc}")
    if params.get("object", True) and not isinstance(value, dict):
        return Verdict(False, detail=f"JSON {type(value).__name__}, not an object")
    return Verdict(True)


@scorer("json_schema", "the reply is JSON valid against `schema` (JSON Schema)", required=("schema",))
def json_schema(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    try:
        value = parse_json_reply(outcome.content)
    except ValueError as exc:
        return Verdict(False, detail=f"not JSON: {exc}")
    errors = sorted(jsonschema.Draft202012Validator(params["schema"]).iter_errors(value), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
        return Verdict(False, detail=f"{where}: {errors[0].message}")
    return Verdict(True)


@scorer(
    "json_match",
    "the reply is a JSON object equal to `expected` (strings ignoring case and spaces, numbers as numbers)",
    required=("expected",),
)
def json_match(params: Mapping[str, Any], outcome: Outcome, context: ScoringContext) -> Verdict:
    ok = json_matches(params["expected"], outcome.content)
    return Verdict(ok, detail="" if ok else "not the expected object")


SCORERS = (json_valid, json_schema, json_match)

"""Procedurally generated tools: a name, a description and typed parameters from a `ToolVocab`, and for each tool
the requests users make of it (text plus the exact arguments they map to) and the results it returns.

A parameter is a `Slot`: what kind of value it holds (a person, a date, an amount, a flag, a choice, a list, an
address...), its JSON schema, the names a tool gives it, and how a request mentions a value ("for Ada Lovelace",
"with high priority", "without notifying anyone"). Required parameters are always mentioned; optional ones now and
then, and only what a request mentions is in the call. Values are copied from the request (names, codes, numbers)
or derived from its words (flags from "including"/"excluding", a list from "a, b and c", a date from "March 3,
2026").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from switchyard_training.tasks.context import TaskContext
from switchyard_training.tasks.tool_requests import long_message
from switchyard_training.tasks.tool_vocab import Action, Domain, ToolVocab

Value = Any

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_NOTES = (
    "running late", "please review by Friday", "call me back", "the draft is attached", "double-check the totals",
    "bring the keys", "second floor, room 4", "see you there", "payment received", "all set for next week",
    "urgent, needs a reply", "left at the front desk", "ask for the manager", "gate code 4410",
)  # fmt: skip
_TAG_WORDS = (
    "red", "blue", "green", "draft", "final", "internal", "client", "q3", "archive", "vip", "new", "old", "todo",
    "review", "home", "work", "summer", "winter", "promo", "beta", "legacy", "north", "south", "east", "west",
)  # fmt: skip
_STREETS = ("Main Street", "Harbor Road", "Elm Avenue", "Station Lane", "Mill Road", "Park Row", "Bridge Street",
            "Cedar Court", "Kings Way", "Market Square", "Quarry Hill", "Orchard Close")  # fmt: skip


def _code(ctx: TaskContext) -> str:
    letters = "".join(ctx.rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(ctx.rng.randint(2, 3)))
    digits = str(ctx.rng.randint(100, 99999))
    return ctx.pick((f"{letters}-{digits}", f"{letters}{digits}", digits, f"{letters.lower()}-{digits}"))


def _date(ctx: TaskContext) -> str:
    return f"{ctx.rng.randint(2025, 2027)}-{ctx.rng.randint(1, 12):02d}-{ctx.rng.randint(1, 28):02d}"


def _say_date(ctx: TaskContext, iso: str) -> str:
    """A date as the request says it: as is, or in words (the call still carries the ISO form)."""
    if ctx.chance(0.6):
        return iso
    year, month, day = (int(part) for part in iso.split("-"))
    return ctx.pick((f"{_MONTHS[month - 1]} {day}, {year}", f"{day} {_MONTHS[month - 1]} {year}"))


def _note(ctx: TaskContext) -> str:
    """A short note, or now and then a long one to copy whole (`tool_requests.long_message`)."""
    return long_message(ctx) if ctx.chance(0.2) else ctx.pick(_NOTES)


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Slot:
    """One kind of parameter: its schema, the names tools give it, a value and how a request says it."""

    kind: str
    names: tuple[str, ...]
    schema: Callable[[TaskContext, str], dict[str, Any]]
    """(ctx, parameter name) -> the parameter's JSON schema."""
    value: Callable[[TaskContext, dict[str, Any]], Value]
    mention: Callable[[TaskContext, str, Value], str]
    """(ctx, parameter name, value) -> the words of the request that carry the value."""
    describe: tuple[str, ...] = ()


def _plain(kind: str, names: tuple[str, ...], value: Callable[[TaskContext], Value],
           frames: tuple[str, ...], describe: tuple[str, ...] = ()) -> Slot:  # fmt: skip
    """A string slot whose value is copied into the request by one of `frames` ('for {v}')."""
    return Slot(
        kind=kind,
        names=names,
        schema=lambda ctx, name: {"type": "string"},
        value=lambda ctx, schema: value(ctx),
        mention=lambda ctx, name, v: ctx.pick(frames).format(v=v, n=name.replace("_", " ")),
        describe=describe,
    )


def _integer_mention(ctx: TaskContext, name: str, value: int) -> str:
    noun = name.replace("_", " ")
    if noun in ("limit", "max results", "top n"):
        return ctx.pick((f"top {value}", f"at most {value} results", f"limit {value}"))
    if noun in ("page",):
        return f"page {value}"
    return ctx.pick((f"{value} {noun}", f"for {value} {noun}", f"with {noun} {value}", f"{noun}: {value}"))


def _amount_mention(ctx: TaskContext, name: str, value: float | int) -> str:
    noun = name.replace("_", " ")
    return ctx.pick((f"{noun} {_number_text(value)}", f"with {_article(noun)} of {_number_text(value)}",
                     f"for {_number_text(value)}", f"{noun} = {_number_text(value)}"))  # fmt: skip


_FLAG_PHRASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "urgent": (("mark it urgent", "it's urgent", "as urgent"), ("not urgent", "no rush")),
    "notify": (("and notify them", "with a notification"), ("without notifying anyone", "no notifications")),
    "include_archived": (
        ("including archived ones", "archived too"),
        ("excluding archived ones", "skip archived"),
    ),
    "public": (("make it public", "publicly"), ("keep it private", "not public")),
    "express": (("express", "the fast way"), ("no express", "standard speed")),
    "dry_run": (("as a dry run", "just a test run"), ("for real", "not a dry run")),
    "recurring": (("every week", "recurring"), ("just once", "one time only")),
    "confirm": (("and confirm it", "with confirmation"), ("no confirmation needed", "without confirming")),
}

_CHOICES: dict[str, tuple[tuple[str, ...], str]] = {
    "priority": (("low", "normal", "high", "critical"), "{v} priority"),
    "format": (("pdf", "csv", "json", "xlsx", "txt"), "as {v}"),
    "size": (("small", "medium", "large", "xl"), "size {v}"),
    "sort_by": (("newest", "oldest", "price", "name", "rating"), "sorted by {v}"),
    "mode": (("fast", "standard", "thorough"), "in {v} mode"),
    "status": (("open", "closed", "pending", "done"), "status {v}"),
    "units": (("metric", "imperial"), "in {v} units"),
    "level": (("beginner", "intermediate", "advanced"), "at {v} level"),
    "color": (("red", "green", "blue", "black", "white", "orange"), "in {v}"),
    "seat": (("window", "aisle", "middle"), "{v} seat"),
    "visibility": (("team", "everyone", "only me"), "visible to {v}"),
}


def _choice_slot() -> Slot:
    def schema(ctx: TaskContext, name: str) -> dict[str, Any]:
        return {"type": "string", "enum": list(_CHOICES[name][0])}

    return Slot(
        kind="choice",
        names=tuple(_CHOICES),
        schema=schema,
        value=lambda ctx, schema: ctx.pick(schema["enum"]),
        mention=lambda ctx, name, v: _CHOICES.get(name, ((), "{v}"))[1].format(v=v),
    )


def _flag_slot() -> Slot:
    return Slot(
        kind="flag",
        names=tuple(_FLAG_PHRASES),
        schema=lambda ctx, name: {"type": "boolean"},
        value=lambda ctx, schema: ctx.chance(0.6),
        mention=lambda ctx, name, v: ctx.pick(_FLAG_PHRASES[name][0 if v else 1]),
    )


def _list_slot() -> Slot:
    def value(ctx: TaskContext, schema: dict[str, Any]) -> list[str]:
        return ctx.rng.sample(_TAG_WORDS, ctx.rng.randint(1, 3))

    def mention(ctx: TaskContext, name: str, v: list[str]) -> str:
        noun = name.replace("_", " ")
        return ctx.pick((f"with {noun} {_listing(v)}", f"{noun}: {', '.join(v)}", f"{noun} {_listing(v)}"))

    return Slot("list", ("tags", "labels", "keywords", "categories"),
                lambda ctx, name: {"type": "array", "items": {"type": "string"}}, value, mention)  # fmt: skip


def _people_slot() -> Slot:
    def value(ctx: TaskContext, schema: dict[str, Any]) -> list[str]:
        return [ctx.person() for _ in range(ctx.rng.randint(1, 3))]

    def mention(ctx: TaskContext, name: str, v: list[str]) -> str:
        return ctx.pick(
            (f"with {_listing(v)}", f"for {_listing(v)}", f"{name.replace('_', ' ')}: {', '.join(v)}")
        )

    return Slot("people", ("attendees", "recipients", "members", "participants"),
                lambda ctx, name: {"type": "array", "items": {"type": "string"}}, value, mention)  # fmt: skip


def _address_slot() -> Slot:
    def schema(ctx: TaskContext, name: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                 "postcode": {"type": "string"}},
                "required": ["street", "city", "postcode"]}  # fmt: skip

    def value(ctx: TaskContext, schema: dict[str, Any]) -> dict[str, str]:
        street = f"{ctx.rng.randint(1, 240)} {ctx.pick(_STREETS)}"
        return {
            "street": street,
            "city": ctx.pick(ctx.entities.cities),
            "postcode": str(ctx.rng.randint(1000, 99999)),
        }

    def mention(ctx: TaskContext, name: str, v: dict[str, str]) -> str:
        return ctx.pick((f"to {v['street']}, {v['city']} {v['postcode']}",
                         f"at {v['street']}, {v['postcode']} {v['city']}"))  # fmt: skip

    return Slot("address", ("address", "shipping_address", "location"), schema, value, mention)


def _period_slot() -> Slot:
    def schema(ctx: TaskContext, name: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"start": {"type": "string", "description": "YYYY-MM-DD"},
                                                 "end": {"type": "string", "description": "YYYY-MM-DD"}},
                "required": ["start", "end"]}  # fmt: skip

    def value(ctx: TaskContext, schema: dict[str, Any]) -> dict[str, str]:
        return dict(zip(("start", "end"), sorted((_date(ctx), _date(ctx))), strict=True))

    def mention(ctx: TaskContext, name: str, v: dict[str, str]) -> str:
        return ctx.pick((f"from {v['start']} to {v['end']}", f"between {v['start']} and {v['end']}"))

    return Slot("period", ("period", "date_range", "window"), schema, value, mention)


def _size_slot() -> Slot:
    def schema(ctx: TaskContext, name: str) -> dict[str, Any]:
        return {"type": "object", "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
                "required": ["width", "height"]}  # fmt: skip

    def value(ctx: TaskContext, schema: dict[str, Any]) -> dict[str, int]:
        return {"width": ctx.rng.randint(10, 400), "height": ctx.rng.randint(10, 400)}

    def mention(ctx: TaskContext, name: str, v: dict[str, int]) -> str:
        return ctx.pick((f"{v['width']} by {v['height']}", f"{v['width']}x{v['height']}",
                         f"width {v['width']} and height {v['height']}"))  # fmt: skip

    return Slot("dimensions", ("dimensions", "size_px", "frame"), schema, value, mention)


def _date_slot() -> Slot:
    return Slot(
        kind="date",
        names=("date", "day", "due_date", "start_date", "on"),
        schema=lambda ctx, name: {
            "type": "string",
            "description": ctx.pick(("YYYY-MM-DD", "ISO date", "date as YYYY-MM-DD")),
        },
        value=lambda ctx, schema: _date(ctx),
        mention=lambda ctx, name, v: ctx.pick(("on {d}", "for {d}", "due {d}", "{d}")).format(
            d=_say_date(ctx, v)
        ),
    )


def _time_slot() -> Slot:
    def value(ctx: TaskContext, schema: dict[str, Any]) -> str:
        return f"{ctx.rng.randint(6, 21):02d}:{ctx.pick(('00', '15', '30', '45'))}"

    return Slot("time", ("time", "at", "start_time"), lambda ctx, name: {"type": "string", "description": "HH:MM"},
                value, lambda ctx, name, v: ctx.pick((f"at {v}", f"{v}")))  # fmt: skip


def _integer_slot() -> Slot:
    return Slot(
        kind="integer",
        names=(
            "count",
            "quantity",
            "guests",
            "nights",
            "seats",
            "days",
            "limit",
            "max_results",
            "page",
            "copies",
            "minutes",
            "people",
        ),
        schema=lambda ctx, name: {"type": "integer"},
        value=lambda ctx, schema: ctx.rng.randint(1, 12) if ctx.chance(0.7) else ctx.rng.randint(13, 500),
        mention=_integer_mention,
    )


def _amount_slot() -> Slot:
    def value(ctx: TaskContext, schema: dict[str, Any]) -> float | int:
        return ctx.rng.randint(5, 5000) if ctx.chance(0.5) else round(ctx.rng.uniform(1, 2000), 2)

    return Slot("amount", ("amount", "price", "budget", "total", "weight_kg", "distance_km", "max_price"),
                lambda ctx, name: {"type": "number"}, value, _amount_mention)  # fmt: skip


SLOTS: tuple[Slot, ...] = (
    _plain(
        "person",
        ("name", "person", "customer", "contact", "owner", "guest", "full_name", "assignee"),
        lambda ctx: ctx.person(),
        ("for {v}", "for {v}", "named {v}", "belonging to {v}", "{n} {v}"),
        ("Full name", "The person's name", "Who it is for"),
    ),
    _plain(
        "city",
        ("city", "location", "destination", "town"),
        lambda ctx: ctx.pick(ctx.entities.cities),
        ("in {v}", "in {v}", "to {v}", "near {v}"),
        ("City name", "Where"),
    ),
    _plain(
        "company",
        ("company", "vendor", "supplier", "organization", "client"),
        lambda ctx: ctx.pick(ctx.entities.companies),
        ("at {v}", "from {v}", "with {v}", "{n} {v}"),
    ),
    _plain(
        "product",
        ("product", "item", "product_name", "item_name"),
        lambda ctx: ctx.pick(ctx.entities.products),
        ("for the {v}", "for a {v}", "{n} {v}"),
    ),
    _plain(
        "code",
        ("id", "reference", "code", "number", "ref"),
        _code,
        ("{v}", "number {v}", "with ID {v}", "ref {v}", "#{v}"),
        ("Identifier", "The reference code"),
    ),
    _plain(
        "email",
        ("email", "email_address", "recipient_email"),
        lambda ctx: (
            f"{ctx.pick(ctx.entities.first_names).lower()}@{ctx.pick(('example.com', 'mail.test', 'corp.example'))}"
        ),
        ("for {v}", "to {v}", "email {v}"),
    ),
    _plain(
        "note",
        ("note", "message", "comment", "title", "subject", "text"),
        lambda ctx: ctx.pick(_NOTES),
        ("saying {v}", 'with the note "{v}"', "{n}: {v}", 'titled "{v}"'),
    ),
    _date_slot(),
    _time_slot(),
    _integer_slot(),
    _amount_slot(),
    _flag_slot(),
    _choice_slot(),
    _list_slot(),
    _people_slot(),
    _address_slot(),
    _period_slot(),
    _size_slot(),
)
SLOT_WEIGHTS = (8, 5, 3, 3, 6, 2, 3, 4, 2, 4, 3, 2, 3, 2, 1, 1, 1, 1)
"""Scalar strings most (most real tools take names and ids), nested objects and arrays now and then."""


@dataclass(frozen=True)
class Parameter:
    name: str
    slot: Slot | None
    """None for a calculator's expression, which `open_tools.math_request` fills rather than a slot."""
    schema: dict[str, Any]
    required: bool


@dataclass(frozen=True)
class ToolSpec:
    """A generated tool: what the model sees (`schema`) and what generating its requests needs."""

    name: str
    action: Action
    domain: Domain
    object: str
    parameters: tuple[Parameter, ...]
    schema: dict[str, Any]


def _name(ctx: TaskContext, action: Action, domain: Domain, obj: str) -> str:
    words = obj.split()
    form = ctx.rng.random()
    if form < 0.55:
        return "_".join((action.name, *words))
    if form < 0.75:
        return action.name + "".join(w.capitalize() for w in words)
    if form < 0.9:
        return "_".join((*domain.name.split(), action.name, *words))
    return "-".join((action.name, *words))


def _article(obj: str) -> str:
    return ("an " if obj[0] in "aeiou" else "a ") + obj


def make_tool(ctx: TaskContext, vocab: ToolVocab, action: Action | None = None, domain: Domain | None = None,
              obj: str | None = None) -> ToolSpec:  # fmt: skip
    """A tool of `vocab`, its action, domain and object drawn unless given; 0 to 4 parameters."""
    domain = domain or ctx.rng.choice(vocab.domains)
    obj = obj or ctx.pick(domain.objects)
    action = action or ctx.rng.choice(vocab.actions)
    count = ctx.rng.choices((0, 1, 2, 3, 4), (1, 6, 6, 4, 2))[0]
    slots: list[Slot] = []
    while len(slots) < count:
        slot = ctx.rng.choices(SLOTS, SLOT_WEIGHTS)[0]
        if all(s.kind != slot.kind for s in slots):
            slots.append(slot)
    parameters = []
    required_count = max(1, len(slots) - ctx.rng.randint(0, 2)) if slots else 0
    used: set[str] = set()
    for i, slot in enumerate(slots):
        name = ctx.pick([n for n in slot.names if n not in used] or list(slot.names))
        if slot.kind == "code" and ctx.chance(0.4):
            name = f"{obj.split()[-1]}_id"
        used.add(name)
        schema = slot.schema(ctx, name)
        if slot.describe and ctx.chance(0.5):
            schema = {**schema, "description": ctx.pick(slot.describe)}
        parameters.append(Parameter(name, slot, schema, required=i < required_count))
    frame = ctx.pick(vocab.descriptions)
    verb = action.request_verbs[0]
    description = frame.format(
        verbs=action.describes, Verbs=action.describes.capitalize(), verb=verb, object=_article(obj),
        domain=domain.name, Domain=domain.name.capitalize(),
    )  # fmt: skip
    name = _name(ctx, action, domain, obj)
    schema = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p.name: p.schema for p in parameters},
                "required": [p.name for p in parameters if p.required],
            },
        },
    }
    return ToolSpec(name, action, domain, obj, tuple(parameters), schema)


@dataclass(frozen=True)
class Request:
    """What a user asks of one tool, and the call it maps to."""

    text: str
    arguments: dict[str, Any]
    verb: str
    object_phrase: str


def _object_phrase(ctx: TaskContext, obj: str) -> str:
    return ctx.pick(
        (f"the {obj}", _article(obj), f"a new {obj}" if ctx.chance(0.2) else f"the {obj}", f"my {obj}")
    )


def mention_arguments(
    ctx: TaskContext, tool: ToolSpec, optional_share: float = 0.5
) -> tuple[str, dict[str, Any]]:
    """The request words that carry a call's arguments, and those arguments (required ones always)."""
    parts, arguments = [], {}
    for parameter in tool.parameters:
        if not parameter.required and not ctx.chance(optional_share):
            continue
        slot = parameter.slot
        if slot is None:
            raise ValueError(f"parameter {parameter.name} has no slot to mention it")
        value = slot.value(ctx, parameter.schema)
        arguments[parameter.name] = value
        parts.append(slot.mention(ctx, parameter.name, value))
    ctx.rng.shuffle(parts)
    if not parts:
        return "", arguments
    joined = (
        " " + parts[0]
        if len(parts) == 1
        else " " + ", ".join(parts[:-1]) + ctx.pick((" and ", ", ")) + parts[-1]
    )
    return joined, arguments


def request_for(ctx: TaskContext, vocab: ToolVocab, tool: ToolSpec) -> Request:
    """A user request for `tool`, worded by one of the vocabulary's frames, with a typo now and then."""
    args_text, arguments = mention_arguments(ctx, tool)
    verb = ctx.pick(tool.action.request_verbs)
    object_phrase = _object_phrase(ctx, tool.object)
    frame = ctx.pick(vocab.commands if ctx.chance(0.8) else vocab.questions)
    text = frame.format(verb=verb, Verb=verb.capitalize(), object=object_phrase, args=args_text)
    if ctx.chance(0.1):
        text = typo(ctx, text, protected=[str(v) for v in _flat_values(arguments)])
    return Request(text, arguments, verb, object_phrase)


def _flat_values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat_values(v)]
    if isinstance(value, list):
        return [x for v in value for x in _flat_values(v)]
    return [value]


def typo(ctx: TaskContext, text: str, protected: list[str]) -> str:
    """Swap two letters of one word that no argument value contains, as a hurried typist would."""
    words = [(m.start(), m.group()) for m in re.finditer(r"[A-Za-z]{4,}", text)]
    words = [(start, w) for start, w in words if not any(w in p for p in protected)]
    if not words:
        return text
    start, word = ctx.rng.choice(words)
    i = ctx.rng.randrange(1, len(word) - 2)
    swapped = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    return text[:start] + swapped + text[start + len(word) :]


_RESULT_FIELDS = ("status", "id", "total", "count", "updated_at", "message")
_STATUSES = ("confirmed", "scheduled", "done", "queued", "active", "pending review", "completed", "on hold")


def run_generated(ctx: TaskContext, tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """A plausible result of `tool` on `arguments`: a status, an id, sometimes a number or an error."""
    if ctx.chance(0.08):
        return {"error": ctx.pick((f"no {tool.object} found", "permission denied", "service unavailable",
                                   f"{tool.object} is locked"))}  # fmt: skip
    result: dict[str, Any] = {"status": ctx.pick(_STATUSES)}
    if ctx.chance(0.6):
        result[f"{tool.object.split()[-1]}_id"] = _code(ctx)
    if ctx.chance(0.4):
        result[ctx.pick(("total", "count", "price", "remaining"))] = ctx.rng.randint(1, 900)
    if ctx.chance(0.3):
        result["updated_at"] = f"{_date(ctx)}T{ctx.rng.randint(0, 23):02d}:{ctx.rng.randint(0, 59):02d}"
    return result


def answer_generated(ctx: TaskContext, tool: ToolSpec, result: dict[str, Any]) -> tuple[str, str | None]:
    """The reply after reading the result, and a value from it the reply must carry."""
    if "error" in result:
        return ctx.pick((f"That didn't work: {result['error']}.",
                         f"The {tool.object} tool returned an error: {result['error']}.")), result["error"]  # fmt: skip
    status = result["status"]
    extras = [f"{key.replace('_', ' ')} {value}" for key, value in result.items() if key != "status"]
    detail = f" ({'; '.join(extras)})" if extras and ctx.chance(0.7) else ""
    reply = ctx.pick((f"Done: the {tool.object} is {status}{detail}.", f"The {tool.object} is now {status}{detail}.",
                      f"Status: {status}{detail}."))  # fmt: skip
    return reply, status

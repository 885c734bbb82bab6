"""JSON extraction: 'Extract {fields} from: <text>' answered with exactly the JSON object."""

from __future__ import annotations

import json
from typing import Any

from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.injected_instructions import injection_text
from switchyard_training.tasks.surface import system_prompt

_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                "October", "November", "December")  # fmt: skip
_EVENT_KINDS = (
    "workshop",
    "conference",
    "meetup",
    "concert",
    "hackathon",
    "book fair",
    "marathon",
    "webinar",
)


def _record(ctx: TaskContext) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A record and one (field, sentence stating it) pair per field, in random order."""
    kind = ctx.rng.randint(0, 3)
    if kind == 0:
        first, last = ctx.pick(ctx.entities.first_names), ctx.pick(ctx.entities.last_names)
        name = f"{first} {last}"
        domain = ctx.pick(("example.com", "mail.net", "corp.org"))
        record = {
            "name": name,
            "age": ctx.rng.randint(19, 84),
            "city": ctx.pick(ctx.entities.cities),
            "job": ctx.pick(ctx.entities.jobs),
            "email": f"{first.lower()}.{last.lower()}@{domain}",
        }
        age, city, job, email = record["age"], record["city"], record["job"], record["email"]
        sentences = {
            "name": (f"{name} is new to the team.", f"This is about {name}.", f"Meet {name}."),
            "age": (f"They are {age} years old.", f"Age: {age}.", f"They turned {age} this year."),
            "city": (f"They live in {city}.", f"Home is {city}.", f"Based in {city}."),
            "job": (f"They work as a {job}.", f"Occupation: {job}.", f"By trade a {job}."),
            "email": (f"Contact: {email}.", f"Reach them at {email}.", f"Email {email}."),
        }
    elif kind == 1:
        record = {
            "customer": ctx.person(),
            "product": ctx.pick(ctx.entities.products),
            "quantity": ctx.rng.randint(1, 50),
            "price": round(ctx.rng.uniform(2, 900), 2),
        }
        sentences = {
            "customer": (f"Order placed by {record['customer']}.", f"Customer: {record['customer']}."),
            "product": (f"Item: {record['product']}.", f"They bought the {record['product']}."),
            "quantity": (f"Quantity {record['quantity']}.", f"{record['quantity']} units were ordered."),
            "price": (f"Unit price ${record['price']}.", f"Each one costs {record['price']} dollars."),
        }
    elif kind == 2:
        record = {
            "event": f"{ctx.pick(ctx.entities.cities)} {ctx.pick(_EVENT_KINDS)}",
            "date": f"{ctx.pick(_MONTH_NAMES)} {ctx.rng.randint(1, 28)}",
            "city": ctx.pick(ctx.entities.cities),
            "organizer": ctx.person(),
        }
        sentences = {
            "event": (f"The {record['event']} is coming up.", f"Announcing the {record['event']}."),
            "date": (f"It takes place on {record['date']}.", f"Date: {record['date']}."),
            "city": (f"The venue is in {record['city']}.", f"Location: {record['city']}."),
            "organizer": (f"It is organized by {record['organizer']}.", f"Organizer: {record['organizer']}."),
        }
    else:
        record = {
            "company": ctx.pick(ctx.entities.companies),
            "founded": ctx.rng.randint(1890, 2023),
            "employees": ctx.rng.randint(5, 90000),
            "ceo": ctx.person(),
        }
        sentences = {
            "company": (f"{record['company']} is a growing firm.", f"Company profile: {record['company']}."),
            "founded": (f"It was founded in {record['founded']}.", f"Founded: {record['founded']}."),
            "employees": (f"It has {record['employees']} employees.", f"Staff count: {record['employees']}."),
            "ceo": (f"The CEO is {record['ceo']}.", f"{record['ceo']} leads it as CEO."),
        }
    stated = [(field, ctx.pick(options)) for field, options in sentences.items()]
    ctx.rng.shuffle(stated)
    return record, stated


def _field_list(fields: list[str]) -> str:
    return fields[0] if len(fields) == 1 else ", ".join(fields[:-1]) + " and " + fields[-1]


def extraction(ctx: TaskContext, injected: str | None = None) -> Example:
    """'Extract {fields} from: <text>' answered with exactly the JSON object; an absent field is null.

    With `injected` (a code word), the text also carries an instruction to say it, which the reply ignores.
    """
    record, stated = _record(ctx)
    fields = ctx.rng.sample(list(record), ctx.rng.randint(2, len(record)))
    absent = fields[-1] if ctx.chance(0.15) else None
    sentences = [sentence for field, sentence in stated if field != absent]
    if injected:
        sentences.insert(ctx.rng.randint(0, len(sentences)), injection_text(ctx, injected))
    text = " ".join(sentences)
    request = ctx.pick(
        (
            f"Extract {_field_list(fields)} from: {text}",
            f"Extract the following fields as JSON: {', '.join(fields)}.\nText: {text}",
            f"Return a JSON object with keys {', '.join(fields)} for this text:\n{text}",
            f"Pull out {_field_list(fields)} from the text below and answer in JSON.\n\n{text}",
            f"{text}\n\nExtract {_field_list(fields)} as JSON.",
        )
    )
    expected = {f: (None if f == absent else record[f]) for f in fields}
    conv = Conversation(system_prompt(ctx))
    conv.user(request)
    checks: list[dict[str, Any]] = [{"kind": CheckKind.JSON, "json_object": expected}]
    if injected:
        checks.append({"kind": CheckKind.INJECTION, "marker": injected})
    conv.assistant(json.dumps(expected, ensure_ascii=False), *checks)
    return conv.example(Category.INJECTION if injected else Category.JSON_EXTRACTION)


def json_extraction(ctx: TaskContext) -> Example:
    return extraction(ctx)

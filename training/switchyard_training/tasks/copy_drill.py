"""Copy drills: short conversations answered only by copying spans of the prompt (training only, not gated)."""

from __future__ import annotations

import json

from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.grounded import ATTRIBUTES, company_facts
from switchyard_training.tasks.surface import noisy, system_prompt


def _copy_item(ctx: TaskContext) -> str:
    """One span worth copying: a name, a number, a code, a place; none recurs often in a corpus."""
    roll = ctx.rng.random()
    if roll < 0.25:
        return ctx.person()
    if roll < 0.45:
        return ctx.pick(ctx.entities.cities)
    if roll < 0.65:
        return str(ctx.rng.randint(0, 10 ** ctx.rng.randint(2, 9)))
    if roll < 0.75:
        return ctx.pick(ctx.entities.products)
    if roll < 0.85:
        return ctx.pick(ctx.entities.companies)
    if roll < 0.92:
        return f"{ctx.rng.randint(1, 9999)}.{ctx.rng.randint(0, 99)}"
    return ctx.pick(ctx.entities.codewords)


def _copy_phrase(ctx: TaskContext) -> str:
    items = [_copy_item(ctx) for _ in range(ctx.rng.randint(1, 4))]
    joiner = ctx.pick((" ", ", ", " and ", " / ", " - "))
    return joiner.join(items)


_RECALL_FIELDS = ("city", "code", "phone", "company", "product", "email", "id")


def fact_paragraph(ctx: TaskContext, sentences: int) -> tuple[str, str]:
    """A paragraph of `sentences` fact sentences about a few companies, each fact stated once, and the
    company its first sentence names."""
    companies = ctx.rng.sample(ctx.entities.companies, max(2, -(-sentences // 3)))
    facts = {company: company_facts(ctx, company) for company in companies}
    pairs = ctx.rng.sample([(c, a) for c in companies for a in ATTRIBUTES], sentences)
    return " ".join(facts[c][a].sentence for c, a in pairs), pairs[0][0]


def rewrite_request(ctx: TaskContext, text: str, named: str) -> tuple[str, str, str]:
    """(request, reply, a name the reply must hold): `text` to repeat word for word, or to repeat with `named`
    replaced by another name."""
    if ctx.chance(0.65):
        lead = ctx.pick(("Say exactly this: ", "Repeat this text word for word:\n", "Copy this paragraph:\n",
                         "Please write this back unchanged:\n"))  # fmt: skip
        return lead + text, text, named
    new = ctx.pick(ctx.entities.companies)
    while new in text:
        new = ctx.pick(ctx.entities.companies)
    request = ctx.pick((f"Rewrite this with {new} in place of {named}:\n{text}",
                        f"Replace {named} with {new} in the following text.\n\n{text}"))  # fmt: skip
    return request, text.replace(named, new), new


def _passage_drill(ctx: TaskContext, conv: Conversation) -> None:
    """A whole paragraph repeated, or repeated with one name replaced: long copies, where a reply is mostly
    continuations of the prompt (what prompt-lookup speculation predicts), not a few copied spans."""
    request, reply, name = rewrite_request(ctx, *fact_paragraph(ctx, ctx.rng.randint(3, 8)))
    conv.user(request)
    conv.assistant(reply, {"kind": CheckKind.FACT, "answer": name})


def copy_drill(ctx: TaskContext) -> Example:
    """Short conversations answered only by copying spans of the prompt (training only, not gated).

    Induction ("find the earlier occurrence, continue it") is what tool arguments, JSON extraction and cited
    answers need, and a small model learns it far sooner from dense drills than from long tool prompts,
    where one example carries a few copied tokens. Every value is a one-off, so recalling fails.
    """
    conv = Conversation(system_prompt(ctx))
    roll = ctx.rng.random()
    if roll < 0.15:
        _passage_drill(ctx, conv)
    elif roll < 0.45:
        phrase = _copy_phrase(ctx)
        lead = ctx.pick(("Say exactly this: ", "Repeat after me: ", "Echo: ", "Copy this exactly:\n",
                         "Please repeat: ", "Write back exactly: "))  # fmt: skip
        conv.user(lead + phrase)
        conv.assistant(phrase, {"kind": CheckKind.FACT, "answer": phrase})
    elif roll < 0.62:
        items = [_copy_item(ctx) for _ in range(ctx.rng.randint(2, 6))]
        listed = ", ".join(items)
        index = ctx.rng.randrange(len(items))
        ordinal = ("first", "second", "third", "fourth", "fifth", "sixth")[index]
        question, reply = ctx.pick(
            (
                (f"Repeat this list: {listed}", listed),
                (f"List: {listed}\nWhat is the {ordinal} item?", items[index]),
                (f"Here are some items: {listed}. Which one is {ordinal}?", f"The {ordinal} item is {items[index]}."),
            )
        )  # fmt: skip
        conv.user(question)
        conv.assistant(
            reply, {"kind": CheckKind.FACT, "answer": items[index] if "item" in question else reply}
        )
    else:
        people = list(dict.fromkeys(ctx.person() for _ in range(ctx.rng.randint(2, 5))))
        field = ctx.pick(_RECALL_FIELDS)
        values = {person: _copy_item(ctx) for person in people}
        records = "\n".join(f"- {person}: {field} {value}" for person, value in values.items())
        person = ctx.pick(people)
        value = values[person]
        if ctx.chance(0.5):
            conv.user(f"Records:\n{records}\nWhat is the {field} of {person}? Answer in JSON.")
            conv.assistant(json.dumps({"name": person, field: value}, ensure_ascii=False),
                           {"kind": CheckKind.JSON, "json_object": {"name": person, field: value}})  # fmt: skip
        else:
            conv.user(noisy(ctx, f"{records}\n\nWhich {field} does {person} have?", lowercase_all=False))
            conv.assistant(f"{person} has {field} {value}.", {"kind": CheckKind.FACT, "answer": value})
    return conv.example(Category.COPY)

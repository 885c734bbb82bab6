"""Grounded answers: numbered passages (company facts, distractors among them) and a question, answered with
a citation, or with a "not in the passages" reply when none of them answers."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.surface import noisy

NOT_FOUND_PHRASES = (
    "do not contain",
    "don't mention",
    "do not say",
    "none of the passages",
    "not in the passages",
    "not given in the passages",
)
"""Every 'the passages lack the answer' reply in the corpus contains one of these (the grader looks for them)."""

ATTRIBUTES = ("founded", "headquarters", "employees", "founder", "product")


@dataclass(frozen=True)
class CompanyFact:
    """One attribute of one company: the passage sentence stating it, a question asking it, the answer value,
    and what a reply names when no passage states it."""

    sentence: str
    question: str
    value: str
    company: str
    noun: str
    """The attribute as a noun phrase, for "Acme: its founding year is not in the passages"."""


def company_facts(ctx: TaskContext, company: str) -> dict[str, CompanyFact]:
    """attribute -> `CompanyFact` for one company.

    Every sentence starts with the company, so a reply that quotes the passage starts with a name copied from
    the question, and each next word is found where that name is followed by the asked attribute's words
    (an induction step, which the small model does well), not by first deciding which passage to quote.

    Every value ends its sentence, so a reply that gives the value first goes on to the passage's number as
    the passage does.

    Every question ends on the company, so the question's word after the name is "?" or ".", never one a reply
    goes on with: with the name copied from the question, run 16 went on with the question's next word
    ("Acme headquartered") in 44 of its 117 wrong continuations after the name."""
    year, city = str(ctx.rng.randint(1890, 2023)), ctx.pick(ctx.entities.cities)
    staff, founder, product = str(ctx.rng.randint(12, 80000)), ctx.person(), ctx.pick(ctx.entities.products)
    return {
        "founded": CompanyFact(
            ctx.pick((f"{company} was founded in {year}.", f"{company} dates back to {year}.")),
            ctx.pick((f"What is the founding year of {company}?", f"Tell me the founding year of {company}.")),
            year, company, "founding year"),
        "headquarters": CompanyFact(
            ctx.pick((f"{company} is headquartered in {city}.", f"{company} keeps its main office in {city}.")),
            ctx.pick((f"Where is the head office of {company}?", f"Which city is home to {company}?")),
            city, company, "head office"),
        "employees": CompanyFact(
            ctx.pick((f"{company} has a headcount of {staff}.", f"{company} has a staff of {staff}.")),
            ctx.pick((f"How many people work at {company}?", f"How many employees are there at {company}?")),
            staff, company, "number of employees"),
        "founder": CompanyFact(
            ctx.pick((f"{company} was started by {founder}.", f"{company} was set up by {founder}.")),
            ctx.pick((f"Who founded {company}?", f"Who started {company}?")),
            founder, company, "founder"),
        "product": CompanyFact(
            ctx.pick((f"{company} is best known for the {product}.", f"{company} is famous for its {product}.")),
            ctx.pick((f"What is the best-known product of {company}?", f"What is the main product of {company}?")),
            product, company, "best-known product"),
    }  # fmt: skip


@dataclass(frozen=True)
class PassageLayout:
    instruction: str
    in_system: bool
    """Passages in the system prompt and the question as the user message; else both in the user message."""
    question_first: bool = False
    """In the user message, the question also before the passages (so each passage is read knowing what is
    asked), and again after them. Not in the corpus: trained on half the user-message prompts (run 9), the
    model answered fewer questions in this layout than with the question last (training/probes/grounded_layouts.py)."""


PASSAGE_INSTRUCTIONS = (
    "Answer the question using only the passages below. Cite the passage number in brackets.",
    "Use the sources to answer, citing them by number. If they don't have the answer, say so.",
    "Answer from these passages only and cite your source.",
)
"""No "[1]" in them: a line ending in a bracketed number reads as a passage."""


def passage_layout(ctx: TaskContext) -> PassageLayout:
    return PassageLayout(ctx.pick(PASSAGE_INSTRUCTIONS), ctx.chance(0.3))


def numbered_passage(passage: str, number: int) -> str:
    """The passage with its number at the end, where a cited reply needs it: a reply that quotes the passage
    finds the number right after the quoted words (numbers in front were followed by the next passage's
    number, which is what the model cited)."""
    return f"{passage.rstrip('.')} [{number}]."


def passages_prompt(
    ctx: TaskContext, layout: PassageLayout, passages: list[str], question: str
) -> tuple[str | None, str]:
    """(system, user) texts that present numbered passages and the question."""
    numbered = "\n".join(numbered_passage(p, i) for i, p in enumerate(passages, start=1))
    if layout.in_system:
        # lower case only at the start: a quoted reply copies the question's company name
        return f"{layout.instruction}\n\n{numbered}", noisy(ctx, question, lowercase_all=False)
    if layout.question_first:
        return None, f"{layout.instruction}\n\nQuestion: {question}\n\n{numbered}\n\nQuestion: {question}"
    return None, f"{layout.instruction}\n\n{numbered}\n\nQuestion: {question}"


def grounded_setup(ctx: TaskContext, answerable: bool) -> tuple[list[str], CompanyFact, int | None]:
    """(passages, the asked fact, its citation or None) with distractor passages."""
    company, other = ctx.rng.sample(ctx.entities.companies, 2)
    facts, other_facts = company_facts(ctx, company), company_facts(ctx, other)
    asked = ctx.pick(ATTRIBUTES)
    distractors = [facts[a].sentence for a in ATTRIBUTES if a != asked]
    distractors += [other_facts[a].sentence for a in ATTRIBUTES]
    ctx.rng.shuffle(distractors)
    passages = distractors[: ctx.rng.randint(1, 4)]
    citation = None
    if answerable:
        citation = ctx.rng.randint(1, len(passages) + 1)
        passages.insert(citation - 1, facts[asked].sentence)
    return passages, facts[asked], citation


def grounded_reply(ctx: TaskContext, passages: list[str], fact: CompanyFact, citation: int | None) -> str:
    if citation is None:
        # The asked company first, as in a quote: every grounded reply then opens by copying the question's
        # company, and whether a passage answers is decided after it, where the passages' continuations of
        # that name are in view (run 13 opened 116 of 271 replies with "The passages ..." to dodge the choice).
        return ctx.pick(
            (
                f"{fact.company}: its {fact.noun} is not in the passages.",
                f"{fact.company}: its {fact.noun} is not given in the passages.",
                f"{fact.company}: the passages do not say its {fact.noun}.",
            )
        )
    roll, forms = ctx.rng.random(), ctx.grounded_forms
    if roll < forms.quote:  # see `company_facts` and `GroundedForms`
        return numbered_passage(passages[citation - 1], citation)
    if roll < forms.quote + forms.value:
        return f"{fact.value} [{citation}]."
    if roll < forms.quote + forms.value + forms.attribute:
        return f"{fact.company}: its {fact.noun} is {fact.value} [{citation}]."
    return f"According to [{citation}], the answer is {fact.value}."


def grounded(ctx: TaskContext) -> Example:
    answerable = ctx.chance(0.75)
    passages, fact, citation = grounded_setup(ctx, answerable)
    return grounded_question(ctx, passage_layout(ctx), passages, fact, citation)


def grounded_question(
    ctx: TaskContext, layout: PassageLayout, passages: list[str], fact: CompanyFact, citation: int | None
) -> Example:
    """The conversation asking `fact`'s question about `passages`; `citation` None when none of them answers."""
    system, user = passages_prompt(ctx, layout, passages, fact.question)
    conv = Conversation(system)
    conv.user(user)
    check = {"kind": CheckKind.GROUNDED, "citation": citation, "answer": fact.value if citation else None}
    conv.assistant(grounded_reply(ctx, passages, fact, citation), check)
    return conv.example(Category.GROUNDED)

"""Held-out arithmetic questions worded as people write them, for the `agent-calculator` suite.

The training corpus asks its calculators in its own phrasings (`tasks/tool_requests.py`, `calculator_request`,
and `tasks/open_tools.py`, `math_request`); these are other ones, kept here and never imported by a corpus generator: polite, terse, lowercase, with
typos, no question mark, operators as words or symbols, two or three numbers. A test checks that no template
here equals a training one and that no rendered question has a training question's shape.

Every question has one unambiguous result: three-number chains are read left to right and only use operator
pairs where that is also the precedence reading (or the wording says "then"), and divisions come out even.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from switchyard.agents.demo_world import evaluate_expression, format_number

OPERATOR_WORDS: dict[str, tuple[str, ...]] = {
    "+": ("plus", "+", "add"),
    "-": ("minus", "-", "take away"),
    "*": ("times", "x", "*", "multiplied by"),
    "/": ("divided by", "/", "over"),
}
"""How people write each operator between two numbers ("add" reads as in "12 add 5", as people type)."""

STEP_WORDS: dict[str, tuple[str, ...]] = {
    "+": ("add {n}", "plus {n}", "add on {n}"),
    "-": ("take away {n}", "subtract {n}", "minus {n}"),
    "*": ("multiply by {n}", "times it by {n}", "multiply that by {n}"),
    "/": ("divide by {n}", "divide it by {n}", "split it {n} ways"),
}
"""One step of a chain worded as an instruction ("start with 40, add 12, then divide by 4")."""

HELDOUT_EXPRESSION_TEMPLATES: tuple[str, ...] = (
    "could you work out {expr} for me",
    "Could you work out {expr} please?",
    "got a sec? {expr}",
    "hey whats {expr} equal to",
    "pls tell me {expr}",
    "need {expr} real quick",
    "do you know what {expr} is",
    "{expr} equals what",
    "wat is {expr}",
    "give me a hand with {expr} please",
    "Would you mind working out {expr}?",
    "im trying to figure out {expr}",
    "can u do {expr}",
    "Hi! {expr}, what does that give?",
    "run the numbers on {expr} for me",
    "so {expr} is how much",
    "Tell me the answer to {expr}.",
    "what would {expr} be",
    "whats the answer for {expr}",
    "Mind checking {expr} for me",
)
"""Frames around an expression written inline ("12 times 7", "12*7", "40 plus 2 minus 5")."""

HELDOUT_OPERATION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "+": (
        "what do i get if i add {a} to {b}",
        "{a} and {b} added together",
        "total of {a} and {b}?",
        "put {a} and {b} together, how many is that",
    ),
    "-": (
        "take {b} away from {a}",
        "how much is left if you subtract {b} from {a}",
        "whats the difference between {a} and {b}",
        "{a} less {b} is what",
    ),
    "*": (
        "{a} lots of {b}",
        "multiply {a} and {b} together for me",
        "what's {a} multiplied with {b}",
        "how much are {a} groups of {b}",
    ),
    "/": (
        "how many times does {b} go into {a}",
        "split {a} into {b} equal parts, how big is each",
        "{a} shared between {b}, how many each",
        "if you divide {a} up by {b} what do you get",
    ),
}
"""Frames that word one operation themselves; `a` is the first operand of the expression (`a - b`, `a / b`)."""

HELDOUT_CHAIN_TEMPLATES: tuple[str, ...] = (
    "start with {a}, {step1}, then {step2}",
    "take {a}, {step1} and {step2}, what do you end up with",
    "if i have {a}, {step1}, then {step2}, what do i get",
    "Begin at {a}. {step1}, then {step2}. Result?",
)
"""Frames of a three-number chain done step by step: ((a op1 b) op2 c)."""


def heldout_templates() -> tuple[str, ...]:
    """Every whole-question template above, for the disjointness test against the training phrasings (the
    step fragments, "add {n}", are words rather than phrasings: the rendered questions' test covers them)."""
    return (
        *HELDOUT_EXPRESSION_TEMPLATES,
        *(t for group in HELDOUT_OPERATION_TEMPLATES.values() for t in group),
        *HELDOUT_CHAIN_TEMPLATES,
    )


@dataclass(frozen=True)
class ArithmeticQuestion:
    text: str
    expression: str
    """What the question asks, in the evaluator's syntax ("(40 + 12) / 4")."""
    result: str
    """`format_number` of its value, as the calculator answers."""
    form: str
    """"inline", "worded" or "chain", "_3" for three numbers, "_typo" with a typo."""


def _operand(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.45:
        return rng.randint(3, 99)
    if roll < 0.9:
        return rng.randint(100, 999)
    return rng.randint(1000, 9999)


def _pair(rng: random.Random, op: str) -> tuple[int, int]:
    """Two operands that suit `op`: divisions come out even, subtractions stay positive."""
    if op == "/":
        b = rng.randint(2, 48)
        return b * rng.randint(2, 99), b
    a, b = _operand(rng), _operand(rng) if op != "*" else rng.randint(2, 99)
    if op == "-" and a < b:
        a, b = b, a
    return a, b


def _next_operand(rng: random.Random, value: float, op: str) -> int:
    """A third operand for `value op n` that keeps the result a whole number."""
    if op == "/":
        divisors = [d for d in range(2, 13) if value % d == 0]
        return rng.choice(divisors) if divisors else 1
    n = _operand(rng) if op in "+-" else rng.randint(2, 12)
    return min(n, int(value) - 1) if op == "-" and value > 2 else n


def _inline(rng: random.Random, numbers: list[int], ops: list[str]) -> str:
    spaced = rng.random() < 0.75
    parts = [str(numbers[0])]
    for op, n in zip(ops, numbers[1:], strict=True):
        word = rng.choice(OPERATOR_WORDS[op])
        parts.append(f" {word} {n}" if spaced or word.isalpha() or " " in word else f"{word}{n}")
    return "".join(parts)


def question(rng: random.Random) -> ArithmeticQuestion:
    """One question: its text, the expression it asks, and the result (never a number of the question)."""
    while True:
        roll = rng.random()
        if roll < 0.45:
            op = rng.choice("+-*/")
            a, b = _pair(rng, op)
            text = rng.choice(HELDOUT_EXPRESSION_TEMPLATES).format(expr=_inline(rng, [a, b], [op]))
            expression, form = f"{a} {op} {b}", "inline"
        elif roll < 0.7:
            op = rng.choice("+-*/")
            a, b = _pair(rng, op)
            text = rng.choice(HELDOUT_OPERATION_TEMPLATES[op]).format(a=a, b=b)
            expression, form = f"{a} {op} {b}", "worded"
        elif roll < 0.85:
            # left to right equals precedence: a * or / first, or a + or - second
            op1, op2 = rng.choice((("*", "+"), ("*", "-"), ("/", "+"), ("+", "-"), ("-", "+"), ("+", "+")))
            a, b = _pair(rng, op1)
            c = _next_operand(rng, evaluate_expression(f"{a} {op1} {b}"), op2)
            text = rng.choice(HELDOUT_EXPRESSION_TEMPLATES).format(expr=_inline(rng, [a, b, c], [op1, op2]))
            expression, form = f"{a} {op1} {b} {op2} {c}", "inline_3"
        else:
            op1, op2 = rng.choice("+-*"), rng.choice("+-*/")
            a, b = _pair(rng, op1)
            c = _next_operand(rng, evaluate_expression(f"{a} {op1} {b}"), op2)
            step1, step2 = (rng.choice(STEP_WORDS[op]).format(n=n) for op, n in ((op1, b), (op2, c)))
            text = rng.choice(HELDOUT_CHAIN_TEMPLATES).format(a=a, step1=step1, step2=step2)
            expression, form = f"({a} {op1} {b}) {op2} {c}", "chain_3"
        if rng.random() < 0.3:
            text = text.lower()
        if rng.random() < 0.15:
            text, form = _typo(rng, text), f"{form}_typo"
        result = format_number(evaluate_expression(expression))
        if _has_unit_factor(expression) or float(result) < 10 or re.search(answer_pattern(result), text):
            continue  # a factor of 1, a one-digit result, or one written in the question would test nothing
        return ArithmeticQuestion(text, expression, result, form)


def _typo(rng: random.Random, text: str) -> str:
    """Two neighbouring letters of one longer word swapped ("cuold"), as fast typing does."""
    words = text.split(" ")
    candidates = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not candidates:
        return text
    index = rng.choice(candidates)
    word = words[index]
    at = rng.randint(1, len(word) - 3)
    words[index] = word[:at] + word[at + 1] + word[at] + word[at + 2 :]
    return " ".join(words)


def _has_unit_factor(expression: str) -> bool:
    return bool(re.search(r"[*/] 1(?!\d)", expression))


def answer_pattern(result: str) -> str:
    """A regex for `result` as a whole number in a reply: thousands commas allowed ("1,200"), not part of
    a longer number ("84" is not in "184" or "84.5")."""
    sign = "-" if result.startswith("-") else ""
    whole, _, fraction = result.removeprefix("-").partition(".")
    groups = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    body = ",?".join([whole, *groups]) + (rf"\.{fraction}" if fraction else "")
    return rf"(?<![\d.,]){re.escape(sign)}{body}(?![\d]|[.,]\d)"


def arithmetic_questions(count: int, seed: int) -> list[ArithmeticQuestion]:
    """`count` distinct questions from one seed (the same list every time)."""
    rng = random.Random(f"switchyard-eval-arithmetic:{seed}")
    questions: list[ArithmeticQuestion] = []
    seen: set[str] = set()
    while len(questions) < count:
        item = question(rng)
        if item.text not in seen:
            seen.add(item.text)
            questions.append(item)
    return questions

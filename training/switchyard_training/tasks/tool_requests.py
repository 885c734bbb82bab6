"""What users ask the tools for: one request generator per tool (the text and the arguments it maps to), and
the assistant's answer once it has read a tool's result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from switchyard.agents.demo_world import UNITS, format_number
from switchyard_training.tasks.context import TaskContext

_UNIT_WORDS: dict[str, tuple[str, ...]] = {
    "km": ("km", "kilometers", "kilometres"),
    "m": ("meters", "metres", "m"),
    "cm": ("centimeters", "cm"),
    "mi": ("miles", "mi"),
    "ft": ("feet", "ft"),
    "in": ("inches",),
    "kg": ("kg", "kilograms", "kilos"),
    "g": ("grams", "g"),
    "lb": ("pounds", "lbs", "lb"),
    "oz": ("ounces", "oz"),
    "l": ("liters", "litres", "L"),
    "ml": ("milliliters", "ml"),
    "gal": ("gallons", "gal"),
    "celsius": ("degrees Celsius", "°C", "Celsius"),
    "fahrenheit": ("degrees Fahrenheit", "°F", "Fahrenheit"),
}
_OP_WORDS = {"+": ("plus",), "-": ("minus",), "*": ("times", "multiplied by"), "/": ("divided by", "over")}


def _number(ctx: TaskContext) -> int | float:
    roll = ctx.rng.random()
    if roll < 0.5:
        return ctx.rng.randint(2, 99)
    if roll < 0.85:
        return ctx.rng.randint(100, 9999)
    return round(ctx.rng.uniform(0.5, 500), ctx.rng.choice((1, 2)))


def calculator_request(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    """A user request and the calculator arguments it maps to."""
    a, b, c = _number(ctx), _number(ctx), _number(ctx)
    op1, op2 = ctx.pick("+-*/"), ctx.pick("+-*")
    form = ctx.rng.randint(0, 5)
    if form == 0:
        expr = f"{a} {op1} {b}"
        text = ctx.pick((f"What is {expr}?", f"Calculate {expr}", f"{expr} = ?", f"How much is {expr}?",
                         f"Can you compute {expr} for me?", f"I need the result of {expr}."))  # fmt: skip
    elif form == 1:
        expr = f"{a} {op1} {b}"
        text = ctx.pick(
            (f"What's {a} {ctx.pick(_OP_WORDS[op1])} {b}?", f"what is {a} {ctx.pick(_OP_WORDS[op1])} {b}")
        )
    elif form == 2:
        expr = f"({a} {op2} {b}) {op1} {c}" if ctx.chance(0.5) else f"{a} {op1} ({b} {op2} {c})"
        text = ctx.pick((f"Evaluate {expr}", f"What does {expr} come to?", f"Compute {expr} please."))
    elif form == 3:
        verb, expr = ctx.pick(
            (
                (f"Add {a} and {b}.", f"{a} + {b}"),
                (f"Subtract {b} from {a}.", f"{a} - {b}"),
                (f"Multiply {a} by {b}.", f"{a} * {b}"),
                (f"Divide {a} by {b}.", f"{a} / {b}"),
                (f"What is the sum of {a} and {b}?", f"{a} + {b}"),
                (f"What is the product of {a} and {b}?", f"{a} * {b}"),
            )
        )
        text = verb
    elif form == 4:
        count, price = ctx.rng.randint(2, 40), round(ctx.rng.uniform(1, 300), 2)
        product = ctx.pick(ctx.entities.products)
        expr = f"{count} * {price}"
        text = ctx.pick((f"I'm buying {count} of the {product} at {price} each. What's the total?",
                         f"How much do {count} units of {product} cost at {price} per unit?"))  # fmt: skip
    else:
        expr = f"{a} {op1} {b} {op2} {c}"
        text = ctx.pick((f"What is {expr}?", f"Please calculate {expr}.", f"{expr}?"))
    return text, {"expression": expr}


def conversion_request(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    dimension = ctx.pick(("length", "length", "mass", "volume", "temperature"))
    units = [u for u, (dim, _) in UNITS.items() if dim == dimension]
    from_unit, to_unit = ctx.rng.sample(units, 2)
    value: int | float = ctx.rng.randint(1, 500) if ctx.chance(0.7) else round(ctx.rng.uniform(0.5, 200), 1)
    src, dst = ctx.pick(_UNIT_WORDS[from_unit]), ctx.pick(_UNIT_WORDS[to_unit])
    text = ctx.pick(
        (
            f"Convert {value} {src} to {dst}.",
            f"How many {dst} is {value} {src}?",
            f"What is {value} {src} in {dst}?",
            f"{value} {src} to {dst}?",
            f"Can you convert {value} {src} into {dst}?",
            f"I have {value} {src}. How much is that in {dst}?",
        )
    )
    return text, {"value": value, "from_unit": from_unit, "to_unit": to_unit}


def weather_request(ctx: TaskContext, city: str | None = None) -> tuple[str, dict[str, Any]]:
    city = city or (ctx.pick(ctx.entities.cities) if ctx.chance(0.9) else ctx.pick(ctx.entities.places))
    text = ctx.pick(
        (
            f"What's the weather in {city}?",
            f"What is the weather like in {city} right now?",
            f"Is it raining in {city}?",
            f"How warm is it in {city} today?",
            f"weather {city}",
            f"Do I need a jacket in {city} today?",
            f"What's the temperature in {city}?",
            f"Check the current weather for {city}.",
        )
    )
    return text, {"city": city}


def time_request(ctx: TaskContext, city: str | None = None) -> tuple[str, dict[str, Any]]:
    city = city or ctx.pick(ctx.entities.cities)
    text = ctx.pick(
        (
            f"What time is it in {city}?",
            f"What's the local time in {city}?",
            f"Current time in {city}?",
            f"Is it late in {city} right now?",
            f"Tell me the time in {city}.",
        )
    )
    return text, {"city": city}


def search_request(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    topic = ctx.pick(ctx.entities.topics)
    if ctx.chance(0.1):  # a topic the document store does not have
        topic = f"{ctx.pick(ctx.entities.products)} {ctx.pick(('policy', 'rules', 'guide'))}"
    text = ctx.pick(
        (
            f"Search the docs for {topic}.",
            f"What do our internal documents say about {topic}?",
            f"Find the company document on {topic}.",
            f"Look up {topic} in the company docs.",
            f"What's our policy on {topic}?",
            f"Can you check the docs about {topic}?",
        )
    )
    return text, {"query": topic}


_MESSAGES = (
    "the report is ready",
    "I'll be late",
    "I'm running ten minutes late",
    "the meeting moved to 3pm",
    "lunch is at noon",
    "the {product} arrived",
    "I'm in {city} until Friday",
    "please call me back",
    "the files are on the shared drive",
    "happy birthday",
    "thanks for your help today",
    "the {topic} form is approved",
)


_CLAUSES = (
    "the {product} order shipped this morning",
    "I moved our meeting with {person} to {day} at {hour}",
    "please bring the printed slides and the budget numbers",
    "the quarterly report is ready for review",
    "the train from {city} is running {n} minutes late",
    "I will call you after lunch",
    "the {topic} form needs your signature by {day}",
    "dinner is booked for {n} people at {hour}",
    "the keys are with {person} at the front desk",
    "we are out of coffee on floor {n}",
    "the client in {city} approved the {product} quote",
    "do not forget the team lunch on {day}",
    "the printer on the second floor is broken again",
    "I sent the {topic} documents to {person}",
    "the parking garage closes at {hour} tonight",
)
_DAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "tomorrow",
    "next week",
)


def long_message(ctx: TaskContext) -> str:
    """Two to four clauses joined as people write a longer message (20 to 50 words), so copying a whole
    message into a call's argument is trained, not only a short phrase."""
    clauses = [
        ctx.pick(_CLAUSES).format(
            product=ctx.pick(ctx.entities.products),
            person=ctx.person(),
            city=ctx.pick(ctx.entities.cities),
            topic=ctx.pick(ctx.entities.topics),
            day=ctx.pick(_DAYS),
            hour=f"{ctx.rng.randint(1, 11)} {ctx.pick(('am', 'pm'))}",
            n=ctx.rng.randint(2, 40),
        )
        for _ in range(ctx.rng.randint(2, 4))
    ]
    text = clauses[0]
    for clause in clauses[1:]:
        text += ctx.pick((", and ", ", so ", "; ", ", also ", " and "))
        text += clause
    return text


def message_request(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    """A request to message someone; the call copies the person and the message from it (a third of the
    messages are long: several clauses)."""
    person = ctx.person() if ctx.chance(0.6) else ctx.pick(ctx.entities.first_names)
    if ctx.chance(0.35):
        message = long_message(ctx)
    else:
        message = ctx.pick(_MESSAGES).format(product=ctx.pick(ctx.entities.products),
                                            city=ctx.pick(ctx.entities.cities), topic=ctx.pick(ctx.entities.topics))  # fmt: skip
    text = ctx.pick(
        (
            f"Send a message to {person} saying {message}.",
            f"Message {person}: {message}.",
            f"Tell {person} that {message}.",
            f"Can you text {person} that {message}?",
            f"Let {person} know {message}.",
            f"Send {person} a message: {message}.",
        )
    )
    return text, {"to": person, "text": message}


REQUESTS: dict[str, Callable[[TaskContext], tuple[str, dict[str, Any]]]] = {
    "calculator": calculator_request,
    "convert_units": conversion_request,
    "get_weather": weather_request,
    "get_current_time": time_request,
    "search_documents": search_request,
    "send_message": message_request,
}


def unit_name(unit: str) -> str:
    return _UNIT_WORDS[unit][0]


def answer_from_result(
    ctx: TaskContext, name: str, arguments: dict[str, Any], result: dict[str, Any]
) -> tuple[str, str | None]:
    """The assistant's reply after reading a tool result, and the value the grader expects in it."""
    if name == "send_message":
        to = arguments.get("to", "them")
        if "error" in result:
            return ctx.pick((f"I did not send the message to {to}: {result['error']}",
                             f"The message to {to} was not sent: {result['error']}")), None  # fmt: skip
        return ctx.pick((f"Done, I sent your message to {to}.", f"Message sent to {to}.")), to
    if "error" in result:
        target = arguments.get("city") or arguments.get("expression") or name
        return ctx.pick((f"Sorry, I couldn't get that: {result['error']}.",
                         f"The tool returned an error for {target}: {result['error']}.")), None  # fmt: skip
    if name == "calculator":
        value = result["result"]
        reply = ctx.pick(
            (f"{arguments['expression']} = {value}.", f"The result is {value}.", f"That comes to {value}.")
        )
        return reply, value
    if name == "convert_units":
        value = format_number(result["value"])
        src = f"{format_number(float(arguments['value']))} {unit_name(arguments['from_unit'])}"
        dst = unit_name(arguments["to_unit"])
        return ctx.pick((f"{src} is about {value} {dst}.", f"That's roughly {value} {dst}.")), value
    if name == "get_weather":
        city, temp, cond = result["city"], result["temperature_c"], result["condition"]
        reply = ctx.pick(
            (
                f"In {city} it's {temp}°C and {cond}, with {result['humidity']}% humidity.",
                f"It's currently {cond} in {city} at {temp}°C, wind {result['wind_kmh']} km/h.",
                f"{city}: {cond}, {temp}°C.",
            )
        )
        return reply, str(temp)
    if name == "get_current_time":
        return ctx.pick((f"It's {result['time']} on {result['weekday']} in {result['city']}.",
                         f"The local time in {result['city']} is {result['time']} ({result['weekday']}).")), result["time"]  # fmt: skip
    if not result["results"]:
        return ctx.pick((f"I couldn't find any documents about {arguments['query']}.",
                         f"The search found nothing on {arguments['query']}.")), None  # fmt: skip
    doc = result["results"][0]
    return ctx.pick((f"According to the {doc['title']} document: {doc['text']}",
                     f"The {doc['title']} document says: {doc['text']}")), doc["text"]  # fmt: skip

"""The bundled model's tool world: the tools it learned to call, their JSON schemas and offline implementations.

The training corpus (the `switchyard-training` package) shows the model real tool results, reproducible from a
seed, and the agent demo (`agents.demo`) serves the same tools, so both read them here: every tool runs offline
over a small `ToolWorld` (a weather table, a clock, a document store) built from a few noun lists;
`send_message` only reports the message sent, as the agent demo's does. The model was trained on these exact
outputs, so a change here changes what the demo's model sees. Schemas are kept short on purpose: they sit in
every tool-use prompt, and on two CPU cores each prompt token costs training time while teaching nothing.
Pure Python: no torch, no faker.
"""

from __future__ import annotations

import ast
import json
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class WorldNouns(Protocol):
    """The noun lists a `ToolWorld` is built from (training's entity lists have these among others)."""

    @property
    def cities(self) -> tuple[str, ...]: ...

    @property
    def topics(self) -> tuple[str, ...]: ...

    @property
    def first_names(self) -> tuple[str, ...]: ...

    @property
    def last_names(self) -> tuple[str, ...]: ...


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


UNITS: dict[str, tuple[str, float]] = {
    # unit -> (dimension, size in the dimension's base unit); temperatures are handled apart.
    "km": ("length", 1000.0),
    "m": ("length", 1.0),
    "cm": ("length", 0.01),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "in": ("length", 0.0254),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "l": ("volume", 1.0),
    "ml": ("volume", 0.001),
    "gal": ("volume", 3.785411784),
    "celsius": ("temperature", 1.0),
    "fahrenheit": ("temperature", 1.0),
}

CALCULATOR = _function(
    "calculator",
    "Evaluate an arithmetic expression.",
    {"expression": {"type": "string", "description": "Arithmetic using + - * / and parentheses"}},
    ["expression"],
)
CONVERT_UNITS = _function(
    "convert_units",
    # The unit list lives in the description rather than in two enums: it is half the prompt tokens.
    "Convert a value between units: " + ", ".join(UNITS) + ".",
    {"value": {"type": "number"}, "from_unit": {"type": "string"}, "to_unit": {"type": "string"}},
    ["value", "from_unit", "to_unit"],
)
GET_WEATHER = _function(
    "get_weather",
    "Get the current weather in a city.",
    {"city": {"type": "string"}},
    ["city"],
)
GET_CURRENT_TIME = _function(
    "get_current_time",
    "Get the current local time in a city.",
    {"city": {"type": "string"}},
    ["city"],
)
SEARCH_DOCUMENTS = _function(
    "search_documents",
    "Search the company's internal documents.",
    {"query": {"type": "string"}},
    ["query"],
)

SEND_MESSAGE = _function(
    "send_message",
    "Send a short message to a person.",
    {"to": {"type": "string"}, "text": {"type": "string"}},
    ["to", "text"],
)

TOOLS: dict[str, dict[str, Any]] = {
    spec["function"]["name"]: spec
    for spec in (CALCULATOR, CONVERT_UNITS, GET_WEATHER, GET_CURRENT_TIME, SEARCH_DOCUMENTS, SEND_MESSAGE)
}
"""Every tool a corpus can offer, in the order corpora draw them from."""
READING_TOOLS: tuple[str, ...] = tuple(name for name in TOOLS if name != "send_message")
"""The tools of corpora before `send_message` (runs up to 27), which `--no-message-tool` reproduces exactly."""


class ToolError(ValueError):
    """A tool was called with arguments it cannot serve; the message becomes the tool's error result."""


_BINARY_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate_expression(expression: str) -> float:
    """Evaluate + - * / and parentheses over numbers, nothing else (no names, calls or powers)."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse expression {expression!r}") from None

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            try:
                return _BINARY_OPS[type(node.op)](walk(node.left), walk(node.right))
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ToolError(f"unsupported expression {expression!r}")

    return walk(tree)


def format_number(value: float) -> str:
    """Integers without a decimal point, others rounded to at most 2 places ('3.5', '0.33')."""
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    if from_unit not in UNITS or to_unit not in UNITS:
        raise ToolError(f"unknown unit: {from_unit if from_unit not in UNITS else to_unit}")
    dim_from, size_from = UNITS[from_unit]
    dim_to, size_to = UNITS[to_unit]
    if dim_from != dim_to:
        raise ToolError(f"cannot convert {from_unit} to {to_unit}")
    if dim_from == "temperature":
        if from_unit == to_unit:
            return value
        return value * 9 / 5 + 32 if from_unit == "celsius" else (value - 32) * 5 / 9
    return value * size_from / size_to


WEATHER_CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "partly cloudy", "stormy")


@dataclass(frozen=True)
class Weather:
    condition: str
    temperature_c: int
    humidity: int
    wind_kmh: int


@dataclass(frozen=True)
class Document:
    title: str
    text: str


@dataclass(frozen=True)
class ToolWorld:
    """The offline state the tools read: built once per corpus (or demo) from its noun lists and seed."""

    weather: dict[str, Weather]
    documents: dict[str, Document]
    """Keyed by topic (the query a user's request maps to)."""

    @classmethod
    def build(cls, entities: WorldNouns, seed: int) -> ToolWorld:
        rng = random.Random(f"world-{seed}")
        weather = {
            city: Weather(
                condition=rng.choice(WEATHER_CONDITIONS),
                temperature_c=rng.randint(-12, 36),
                humidity=rng.randint(20, 95),
                wind_kmh=rng.randint(0, 60),
            )
            for city in entities.cities
        }
        documents = {topic: _make_document(topic, entities, rng) for topic in entities.topics}
        return cls(weather=weather, documents=documents)

    def weather_in(self, city: str) -> tuple[str, Weather] | None:
        """(the table's spelling of the city, its weather); matching ignores case, as users type freely."""
        wanted = city.strip().casefold()
        return next(((name, w) for name, w in self.weather.items() if name.casefold() == wanted), None)

    def document_on(self, query: str) -> Document | None:
        wanted = query.strip().casefold()
        return next((doc for topic, doc in self.documents.items() if topic.casefold() == wanted), None)


_DOC_SENTENCES = (
    "Requests about {topic} go to the {team} team within {n} working days.",
    "The {topic} rules were last updated on {month} {day}.",
    "For {topic}, each employee may claim up to {n} items per quarter.",
    "Questions about {topic} can be sent to {name}.",
    "The {topic} form must be approved by your manager before {month} {day}.",
    "For {topic}, the limit is {n} per person per year.",
    "{name} from the {team} team owns the {topic} process.",
)
_TEAMS = ("People", "Finance", "IT", "Facilities", "Security", "Legal", "Operations")
_MONTHS = ("January", "March", "April", "June", "August", "September", "October", "December")


def _make_document(topic: str, entities: WorldNouns, rng: random.Random) -> Document:
    template = rng.choice(_DOC_SENTENCES)
    text = template.format(
        topic=topic,
        team=rng.choice(_TEAMS),
        n=rng.randint(2, 30),
        month=rng.choice(_MONTHS),
        day=rng.randint(1, 28),
        name=f"{rng.choice(entities.first_names)} {rng.choice(entities.last_names)}",
    )
    return Document(title=topic.capitalize(), text=text)


def run_tool(world: ToolWorld, name: str, arguments: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Execute one call and return its result object; bad calls return {"error": ...} as a real tool would.

    `rng` supplies what the world does not fix (the clock), so results stay reproducible from the seed.
    """
    try:
        if name == "calculator":
            return {"result": format_number(evaluate_expression(str(arguments["expression"])))}
        if name == "convert_units":
            value = float(arguments["value"])
            converted = convert_units(value, str(arguments["from_unit"]), str(arguments["to_unit"]))
            return {"value": float(format_number(converted)), "unit": arguments["to_unit"]}
        if name == "get_weather":
            found = world.weather_in(str(arguments["city"]))
            if found is None:
                raise ToolError(f"no weather data for {arguments['city']}")
            city, weather = found
            return {
                "city": city,
                "condition": weather.condition,
                "temperature_c": weather.temperature_c,
                "humidity": weather.humidity,
                "wind_kmh": weather.wind_kmh,
            }
        if name == "get_current_time":
            city = str(arguments["city"])
            hour, minute = rng.randint(0, 23), rng.choice(range(0, 60, 5))
            weekday = rng.choice(
                ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
            )
            return {"city": city, "time": f"{hour:02d}:{minute:02d}", "weekday": weekday}
        if name == "search_documents":
            doc = world.document_on(str(arguments["query"]))
            if doc is None:
                return {"results": []}
            return {"results": [{"title": doc.title, "text": doc.text}]}
        if name == "send_message":
            to, text = str(arguments["to"]).strip(), str(arguments["text"]).strip()
            if not to or not text:
                raise ToolError("a message needs a recipient and a text")
            return {"status": "sent", "to": to}
    except KeyError as exc:
        return {"error": f"missing argument {exc.args[0]}"}
    except (ToolError, ValueError) as exc:
        return {"error": str(exc)}
    return {"error": f"unknown tool {name}"}


def dumps_result(result: dict[str, Any]) -> str:
    """Tool results travel as JSON text in the `tool` message, as OpenAI-style clients send them."""
    return json.dumps(result, ensure_ascii=False)

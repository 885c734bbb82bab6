"""Plain chat: greetings, questions the built-in fact table answers, honest "I don't know"s outside it,
names to remember, echo requests."""

from __future__ import annotations

from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.tasks.context import Conversation, TaskContext
from switchyard_training.tasks.surface import noisy, system_prompt

UNKNOWN_PHRASES = ("i don't know", "i do not know", "i'm not sure")
"""Every reply to a question outside the fact table contains one of these."""


_CAPITALS = {
    "France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Canada": "Ottawa", "Brazil": "Brasilia",
    "Egypt": "Cairo", "Norway": "Oslo", "Peru": "Lima", "India": "New Delhi", "Australia": "Canberra",
    "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Mexico": "Mexico City", "Ghana": "Accra",
    "Portugal": "Lisbon", "Poland": "Warsaw", "Vietnam": "Hanoi", "Chile": "Santiago", "Ireland": "Dublin",
}  # fmt: skip
_SYMBOLS = {
    "gold": "Au", "silver": "Ag", "iron": "Fe", "oxygen": "O", "hydrogen": "H", "sodium": "Na",
    "carbon": "C", "helium": "He", "copper": "Cu", "lead": "Pb", "nitrogen": "N", "potassium": "K",
}  # fmt: skip
# (question paraphrases, short answer the reply must contain, reply)
_MISC_FACTS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("How many days are in a week?", "How many days does a week have?"), "7", "A week has 7 days."),
    (("How many legs does a spider have?", "Spiders have how many legs?"), "8", "A spider has 8 legs."),
    (("How many minutes are in an hour?", "Minutes in an hour?"), "60", "There are 60 minutes in an hour."),
    (("At what temperature does water boil at sea level?", "What is the boiling point of water?"), "100",
     "Water boils at 100°C at sea level."),
    (("What is the freezing point of water?", "At what temperature does water freeze?"), "0",
     "Water freezes at 0°C."),
    (("What is the largest planet in the solar system?", "Which planet is the biggest?"), "Jupiter",
     "Jupiter is the largest planet in the solar system."),
    (("How many planets are in the solar system?", "How many planets orbit the Sun?"), "8",
     "There are 8 planets in the solar system."),
    (("How many hours are in a day?", "How many hours does a day have?"), "24", "A day has 24 hours."),
    (("How many continents are there?", "What is the number of continents?"), "7", "There are 7 continents."),
    (("Who wrote Hamlet?", "Who is the author of Hamlet?"), "Shakespeare", "Hamlet was written by William Shakespeare."),
    (("What is the largest ocean?", "Which ocean is the biggest?"), "Pacific", "The Pacific is the largest ocean."),
    (("What is the tallest mountain in the world?", "Which mountain is the highest?"), "Everest",
     "Mount Everest is the tallest mountain in the world."),
    (("How many sides does a hexagon have?", "A hexagon has how many sides?"), "6", "A hexagon has 6 sides."),
    (("What is the chemical formula of water?", "What is water made of?"), "H2O", "The chemical formula of water is H2O."),
    (("Which planet is called the Red Planet?", "What is the Red Planet?"), "Mars", "Mars is called the Red Planet."),
    (("How many colors are in a rainbow?", "How many colours does a rainbow have?"), "7", "A rainbow has 7 colors."),
    (("How many bones does an adult human have?", "How many bones are in the human body?"), "206",
     "An adult human has 206 bones."),
    (("What gas do plants absorb from the air?", "Which gas do plants take in?"), "carbon dioxide",
     "Plants absorb carbon dioxide from the air."),
)  # fmt: skip


def fact_question(ctx: TaskContext) -> tuple[str, str, str]:
    """(question, reply, short answer) drawn from the built-in fact table."""
    kind = ctx.rng.randint(0, 2)
    if kind == 0:
        country = ctx.pick(list(_CAPITALS))
        city = _CAPITALS[country]
        question = ctx.pick(
            (
                f"What is the capital of {country}?",
                f"Which city is the capital of {country}?",
                f"What's {country}'s capital?",
                f"Tell me the capital of {country}.",
                f"capital of {country}?",
            )
        )
        reply = ctx.pick(
            (f"The capital of {country} is {city}.", f"{city} is the capital of {country}.", f"It's {city}.")
        )
        return question, reply, city
    if kind == 1:
        element = ctx.pick(list(_SYMBOLS))
        symbol = _SYMBOLS[element]
        question = ctx.pick(
            (
                f"What is the chemical symbol for {element}?",
                f"What's the symbol of {element}?",
                f"Which element symbol stands for {element}?",
            )
        )
        reply = ctx.pick((f"The chemical symbol for {element} is {symbol}.", f"It's {symbol}."))
        return question, reply, symbol
    questions, short, reply = ctx.rng.choice(_MISC_FACTS)
    return ctx.pick(questions), reply, short


def unknown_question(ctx: TaskContext) -> tuple[str, str]:
    """A question about something outside the fact table, and an honest 'I don't know' reply."""
    place = ctx.pick(ctx.entities.places)
    company = ctx.pick(ctx.entities.companies)
    person = ctx.person()
    question, topic = ctx.pick(
        (
            (f"What is the capital of {place}?", f"the capital of {place}"),
            (f"What is the population of {place}?", f"the population of {place}"),
            (f"Who founded {company}?", f"who founded {company}"),
            (f"How old is {person}?", f"how old {person} is"),
            (f"When was {company} founded?", f"when {company} was founded"),
            (f"What is {person}'s phone number?", f"{person}'s phone number"),
            (f"What currency is used in {place}?", f"the currency of {place}"),
        )
    )
    reply = ctx.pick(
        (
            f"I don't know {topic}.",
            f"I'm not sure about {topic}; I don't have that information.",
            f"Sorry, I don't know {topic}.",
            f"I do not know {topic}. You could check a reliable source.",
        )
    )
    return question, reply


# ------------------------------------------------------------------------------------------------- chat

GREETINGS = ("Hi", "Hello", "Hey", "Good morning", "Good evening", "Hi there", "Hello!", "Hey there!", "Yo")
GREETING_REPLIES = (
    "Hello! How can I help you today?",
    "Hi! What can I do for you?",
    "Hey! How can I help?",
    "Hello! What would you like to know?",
)
THANKS = ("Thanks!", "Thank you.", "thanks a lot", "Great, thanks!", "Perfect, thank you!", "ok thanks")
THANKS_REPLIES = ("You're welcome!", "Happy to help!", "Glad I could help.", "Any time!")
_BYES = ("Bye!", "Goodbye.", "See you later.", "That's all, bye.")
_BYE_REPLIES = ("Goodbye! Have a great day.", "Bye! Take care.", "See you!")
IDENTITY_QUESTIONS = ("Who are you?", "What are you?", "What can you do?", "Are you a human?")
_IDENTITY_REPLY = (
    "I'm Switchyard Chat, a small assistant model. I can answer simple questions, call tools, "
    "extract data as JSON and answer from passages you give me."
)


def _chat_turn(ctx: TaskContext, conv: Conversation, name_known: str | None) -> str | None:
    """Append one user/assistant exchange; returns the user's name once they have said it."""
    roll = ctx.rng.random()
    if roll < 0.25:
        question, reply, short = fact_question(ctx)
        conv.user(noisy(ctx, question))
        conv.assistant(reply, {"kind": CheckKind.FACT, "answer": short})
    elif roll < 0.45:
        question, reply = unknown_question(ctx)
        conv.user(noisy(ctx, question))
        conv.assistant(reply, {"kind": CheckKind.UNKNOWN})
    elif roll < 0.55 and name_known:
        conv.user(ctx.pick(("What's my name?", "Do you remember my name?", "What did I say my name was?")))
        conv.assistant(ctx.pick((f"Your name is {name_known}.", f"You said your name is {name_known}.")),
                       {"kind": CheckKind.FACT, "answer": name_known})  # fmt: skip
    elif roll < 0.65:
        name = ctx.pick(ctx.entities.first_names)
        conv.user(ctx.pick((f"My name is {name}.", f"I'm {name}.", f"Hi, I am {name}!", f"Call me {name}.")))
        conv.assistant(
            ctx.pick((f"Nice to meet you, {name}! How can I help?", f"Hi {name}! What can I do for you?"))
        )
        return name
    elif roll < 0.75:
        phrase = ctx.pick(
            (
                f"{ctx.pick(ctx.entities.cities)} in the spring",
                f"the {ctx.pick(ctx.entities.products)} is ready",
                f"{ctx.person()} called at {ctx.rng.randint(1, 12)}",
                f"order {ctx.rng.randint(100, 99999)} shipped",
            )
        )
        conv.user(ctx.pick((f"Repeat after me: {phrase}", f"Say exactly this: {phrase}", f"Echo: {phrase}")))
        conv.assistant(phrase, {"kind": CheckKind.FACT, "answer": phrase})
    elif roll < 0.85:
        conv.user(ctx.pick(IDENTITY_QUESTIONS))
        conv.assistant(_IDENTITY_REPLY)
    elif roll < 0.93:
        conv.user(ctx.pick(THANKS))
        conv.assistant(ctx.pick(THANKS_REPLIES))
    else:
        conv.user(ctx.pick(_BYES))
        conv.assistant(ctx.pick(_BYE_REPLIES))
    return None


def chat(ctx: TaskContext) -> Example:
    conv = Conversation(system_prompt(ctx))
    if ctx.chance(0.4):
        conv.user(ctx.pick(GREETINGS))
        conv.assistant(ctx.pick(GREETING_REPLIES))
    name = None
    for _ in range(ctx.rng.choice((1, 1, 2, 2, 3))):
        name = _chat_turn(ctx, conv, name) or name
    return conv.example(Category.CHAT)

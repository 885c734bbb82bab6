"""A small document set (Markdown, text, PDF) written for the RAG tests, and 20 questions about it."""

from __future__ import annotations

from pathlib import Path

from rag_pdf_writer import write_pdf

PUMP_MD = """# Orion Pump Manual

## Operating speed
The Orion pump runs at 3000 rpm under normal load and must not exceed 3600 rpm.

## Maintenance
Replace the impeller seal every 18 months or after 4000 operating hours, whichever comes first.

## Noise
A grinding noise usually means the bearing is dry; lubricate it with lithium grease.

## Power
The pump draws 2.2 kilowatts from a 400 volt three-phase supply.
"""

KITCHEN_MD = """# Team Kitchen Rules

## Coffee machine
The espresso machine is descaled every Friday by the person on the cleaning rota.

## Fridge
Food left in the fridge is thrown away on Thursday evening.

## Dishwasher
Run the dishwasher on the eco programme at 50 degrees.

## Guests
Visitors may use the kitchen only when accompanied by an employee.
"""

GARDEN_MD = """# Community Garden

## Watering
Tomatoes in the community garden are watered every morning before 8 am.

## Plots
Each member rents one plot of four square metres for 25 euros a season.

## Compost
The compost bin is emptied on the first Saturday of every month.

## Tools
The tool shed key hangs on a hook behind the greenhouse door.
"""

TRAVEL_TXT = """Train tickets for business trips are booked through the travel desk at least seven days in advance.

Hotel costs are reimbursed up to 150 euros per night in Berlin and 120 euros elsewhere.

Flights shorter than four hours are booked in economy class.

Receipts must be uploaded to the expense portal within 30 days of the trip.
"""

SECURITY_PAGES = [
    [
        "Security policy, page one.",
        "Passwords must be at least 14 characters long and are rotated once a year.",
    ],
    [
        "Security policy, page two.",
        "Report a lost badge to the security office on the ground floor within one hour.",
    ],
    ["Security policy, page three.", "Laptops lock automatically after five minutes of inactivity."],
    [
        "Security policy, page four.",
        "Two-factor authentication uses a hardware key for all administrator accounts.",
    ],
]

QUESTIONS: list[tuple[str, str, str]] = [
    ("How fast does the Orion pump spin in normal operation?", "pumps.md", "3000 rpm"),
    ("How often should the impeller seal be changed?", "pumps.md", "18 months"),
    ("What does it mean when the pump makes a grinding sound?", "pumps.md", "bearing is dry"),
    ("How much electrical power does the pump consume?", "pumps.md", "2.2 kilowatts"),
    ("When does the coffee machine get descaled?", "kitchen.md", "descaled every Friday"),
    ("When is old food cleared out of the fridge?", "kitchen.md", "thrown away on Thursday"),
    ("Which dishwasher setting should I use?", "kitchen.md", "eco programme"),
    ("Can guests come into the kitchen on their own?", "kitchen.md", "Visitors may use"),
    ("How far ahead do I need to book a train for a work trip?", "travel.txt", "seven days in advance"),
    ("What is the maximum hotel refund per night in Berlin?", "travel.txt", "150 euros"),
    ("What seat class do we fly on short flights?", "travel.txt", "economy class"),
    ("What is the deadline for submitting receipts after travelling?", "travel.txt", "within 30 days"),
    ("What is the minimum password length?", "security.pdf", "14 characters"),
    ("When does my laptop lock itself if I leave it idle?", "security.pdf", "five minutes"),
    ("I lost my badge, what should I do?", "security.pdf", "lost badge"),
    ("What do administrators use for two-factor login?", "security.pdf", "hardware key"),
    ("At what time are the tomatoes watered?", "garden.md", "before 8 am"),
    ("How much does it cost to rent a garden plot?", "garden.md", "25 euros a season"),
    ("When is the compost emptied?", "garden.md", "first Saturday"),
    ("Where can I find the key to the tool shed?", "garden.md", "tool shed key"),
]
"""(question, file name of the answer, a phrase only the answering passage contains)."""


def write_corpus(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in (
        ("pumps.md", PUMP_MD),
        ("kitchen.md", KITCHEN_MD),
        ("garden.md", GARDEN_MD),
        ("travel.txt", TRAVEL_TXT),
    ):
        (folder / name).write_text(text)
        files.append(folder / name)
    files.append(write_pdf(folder / "security.pdf", SECURITY_PAGES))
    return files

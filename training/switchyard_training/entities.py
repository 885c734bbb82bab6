"""The nouns the synthetic corpus is built from, in two disjoint sets: one for training, one held out.

The quality gate must measure whether the bundled models *copy and reason* rather than recall strings they saw,
so the held-out corpus draws its people, cities, companies, products, topics and injection code words from
lists that share no entry with the training lists. Real-world names are split between the two sets by a
stable rule (every fourth entry is held out); synthetic names are built from two disjoint syllable inventories,
which also gives the training set names no tokenizer merge has seen as a whole word.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from switchyard_training.real_entries import RealEntries, load_real_entries


def _words(text: str) -> list[str]:
    return text.split()


def _phrases(text: str) -> list[str]:
    return [item.strip() for item in text.replace("\n", "").split("|") if item.strip()]


_FIRST_NAMES = _words("""
Maria James Aisha Chen Olga Pedro Fatima Lars Priya Kenji Amara Diego Ingrid Tomasz Leila Rafael Sofia
Hiroshi Nadia Oscar Yusuf Elena Mateo Zara Bjorn Mei Kwame Lucia Arjun Hana Emil Rosa Tariq Clara Dmitri
Ines Kofi Greta Samir Alma Jonas Keiko Felix Amina Marco Freya Ravi Lina Hugo Nia Anton Selma Omar Vera
Jamal Elif Nils Sana Pablo Ayla Viktor Imani Bruno Leona Malik Astrid Ivan Tala Rohan Jana Theo Wen Ada
Farid Mila Andre Zainab Lukas Esme Sven Noor Caleb Yara Matteo Kaia Idris Lotte Ezra Anya Moritz Dalia
""")

_LAST_NAMES = _words("""
Garcia Okafor Nakamura Petrova Silva Jensen Haddad Kowalski Mendes Tanaka Osei Novak Lindqvist Rossi
Moreau Khan Fischer Santos Ivanova Mbeki Larsen Costa Yilmaz Horvat Dubois Ahmed Becker Ortiz Sato Nilsen
Mensah Kovacs Varga Romano Weber Alvarez Park Schmidt Nowak Eriksen Bianchi Hughes Adeyemi Castillo
Lindgren Murphy Kim Popescu Fernandes Dahl Abara Vogel Rahman Suzuki Brennan Quispe Halvorsen Moretti
Keller Ndiaye Lopez Chandra Berg Watanabe Pereira Sorensen Oyelaran Torres Kaplan Duarte Holm Banerjee
""")

_CITIES = _words("""
Oslo Lisbon Nairobi Osaka Denver Lyon Krakow Porto Accra Hanoi Quito Perth Dublin Seville Tbilisi Bergen
Leeds Turin Cusco Busan Malmo Graz Tartu Cork Dakar Fukuoka Boise Halifax Adelaide Bilbao Lagos Riga Split
Utrecht Geneva Kyoto Austin Tampere Aarhus Brno Nantes Valencia Wellington Hobart Salzburg Ghent Bologna
Tromso Galway Lima Santiago Montreal Seattle Vilnius Ljubljana Antwerp Palermo Sapporo Goa Mombasa Zagreb
Reykjavik Tallinn Bordeaux Marseille Naples Florence Gothenburg Uppsala Aachen Leipzig Dresden Basel Bern
Cardiff Belfast Glasgow Bristol Windhoek Kigali Arusha Muscat Doha Izmir Varna Plovdiv Cluj Kaunas Odense
""")

_PRODUCTS = _phrases("""
standing desk|wireless mouse|espresso machine|hiking boots|noise-cancelling headphones|mechanical keyboard|
yoga mat|electric kettle|desk lamp|backpack|water bottle|office chair|phone charger|monitor arm|rain jacket|
blender|cast iron pan|bike helmet|smart watch|bluetooth speaker|camping tent|sleeping bag|air purifier|
coffee grinder|laptop stand|webcam|fountain pen|notebook|running shoes|tea kettle|rice cooker|toaster|
drill set|garden hose|paint roller|wool sweater|umbrella|sunglasses|travel mug|cutting board|chef knife|
robot vacuum|hair dryer|space heater|microphone|tripod|e-reader|board game|puzzle|skateboard|kayak paddle
""")

_JOBS = _phrases("""
nurse|software engineer|teacher|architect|chef|pilot|accountant|electrician|data analyst|pharmacist|
librarian|carpenter|journalist|dentist|photographer|mechanic|biologist|translator|designer|plumber|
lawyer|economist|geologist|paramedic|baker|florist|veterinarian|surveyor|editor|physicist|
""")

_TOPICS = _phrases("""
vacation policy|expense reports|remote work|parental leave|password rotation|laptop refunds|travel booking|
security badges|onboarding checklist|code review guidelines|on-call rotation|office parking|meeting rooms|
health insurance|training budget|sick leave|equipment returns|visitor access|data retention|printer setup|
bike storage|holiday calendar|performance reviews|referral bonus|wifi access|desk booking|shipping returns|
conference travel|mentoring program|recycling rules|coffee machine|fire drills|badge replacement|
""")

_CODEWORDS = _phrases("""
PINEAPPLE|BLUE MOON|ACCESS GRANTED|I HAVE BEEN PWNED|BANANA PROTOCOL|RED ALERT|SYSTEM OVERRIDE|COPPER KETTLE|
JACKPOT|PURPLE TIGER|OPEN SESAME|GAME OVER|MANGO TANGO|SILVER FOX|NO LIMITS|ZEBRA CROSSING|HELLO WORLD 99|
ROOT ACCESS|LEMON DROP|MIDNIGHT TRAIN|GOLDEN GOOSE|WHITE RABBIT|DISCO INFERNO|THUNDERBOLT|SECRET SAUCE|
BUTTERFLY EFFECT|PAPER PLANE|IRON CURTAIN|CHERRY BOMB|OCEAN DRIVE|ROCKET FUEL|CLOUD NINE|
""")

_COMPANY_SUFFIXES_TRAIN = ("Labs", "Systems", "Dynamics", "Foods", "Energy", "Robotics", "Logistics", "Media")
_COMPANY_SUFFIXES_HELDOUT = ("Works", "Analytics", "Textiles", "Motors", "Health", "Studios")

# Disjoint syllable inventories: a held-out synthetic name can never coincide with a training one.
_SYLLABLES_TRAIN = (
    "kor",
    "va",
    "mel",
    "tra",
    "zin",
    "bo",
    "ral",
    "qu",
    "sen",
    "dor",
    "li",
    "fen",
    "mar",
    "tu",
)
_SYLLABLES_HELDOUT = ("xa", "pim", "gul", "ve", "nox", "ha", "ith", "rud", "ce", "lom", "waj", "bri")


@dataclass(frozen=True)
class EntityLists:
    """The nouns one corpus draws from. Training and held-out corpora get disjoint instances."""

    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    cities: tuple[str, ...]
    companies: tuple[str, ...]
    products: tuple[str, ...]
    jobs: tuple[str, ...]
    topics: tuple[str, ...]
    """Subjects of internal documents, searched by the document-search tool."""
    codewords: tuple[str, ...]
    """Phrases an injected instruction asks the assistant to say; seeing one in an answer means it obeyed."""
    places: tuple[str, ...]
    """Invented countries and regions, asked about to teach 'I don't know' outside the fact table."""


def _split(items: list[str], held_out: bool) -> tuple[str, ...]:
    """Every fourth item is held out; the rest train. Stable under reordering of nothing but the list."""
    return tuple(item for i, item in enumerate(items) if (i % 4 == 3) == held_out)


def _synthetic_names(syllables: tuple[str, ...], count: int, seed: int, parts: tuple[int, int]) -> list[str]:
    rng = random.Random(seed)
    names: set[str] = set()
    while len(names) < count:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(*parts)))
        if 4 <= len(word) <= 11:
            names.add(word.capitalize())
    return sorted(names)


def make_entities(held_out: bool = False, synthetic_count: int = 60) -> EntityLists:
    """Build the training (`held_out=False`) or held-out entity lists; the two share no entry."""
    syllables = _SYLLABLES_HELDOUT if held_out else _SYLLABLES_TRAIN
    suffixes = _COMPANY_SUFFIXES_HELDOUT if held_out else _COMPANY_SUFFIXES_TRAIN
    seed = 1 if held_out else 0
    company_stems = _synthetic_names(syllables, synthetic_count, seed, (2, 3))
    rng = random.Random(seed + 100)
    companies = tuple(f"{stem} {rng.choice(suffixes)}" for stem in company_stems)
    synthetic_cities = _synthetic_names(syllables, synthetic_count // 3, seed + 200, (2, 3))
    places = tuple(
        f"{name}{rng.choice(('ia', 'land', 'stan', 'ora'))}"
        for name in _synthetic_names(syllables, synthetic_count // 2, seed + 300, (2, 2))
    )
    return EntityLists(
        first_names=_split(_FIRST_NAMES, held_out),
        last_names=_split(_LAST_NAMES, held_out),
        cities=_split(_CITIES, held_out) + tuple(synthetic_cities),
        companies=companies,
        products=_split(_PRODUCTS, held_out),
        jobs=_split(_JOBS, held_out),
        topics=_split(_TOPICS, held_out),
        codewords=_split(_CODEWORDS, held_out),
        places=places,
    )


# Invented-word alphabet of the widened training lists: every letter, so held-out names' odd pieces
# (their syllables and rare real names) appear in training text too, in words no list repeats often.
_ONSETS = (*"bcdfghjklmnprstvwxz", "br", "ch", "dr", "gl", "kr", "pl", "sh", "st", "th", "tr", "qu")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ou", "y")
_CODAS = ("", "", "", "", "n", "r", "s", "l", "k", "m", "x", "t")
REPEATED_SYLLABLE_SHARE = 0.15
"""Of the invented training names: about what a 12-syllable inventory gives (one repeat in 12 adjacent pairs,
one or two pairs a name) with room to spare."""
_GENERIC_NOUNS = _words("""
lamp kettle chair bottle speaker charger blender heater scanner router drone mug pen tablet clock fan
jacket boots cart grill mixer printer camera stroller kit tent radio""")
_TOPIC_NOUNS = _words("policy rules guide process checklist requests allowance schedule access program")
_ROLE_NOUNS = _words("technician specialist assistant manager inspector operator consultant coordinator")
_COMPANY_SUFFIXES_WIDE = _words("""
Labs Systems Dynamics Foods Energy Robotics Logistics Media Group Partners Industries Holdings Networks Brands
Capital Devices Designs Goods Games Farms Aerospace Pharma Software Solutions Ventures Supply Materials
Instruments Marine Mining Optics Apparel Audio Cycles Outdoors Kitchens Tools Mills Records Press Airlines
Bank Clinic Bakery Chemicals Electric Freight Foundry Gear Interiors Labels Metals Paper Plastics Power
Security Sports Telecom Toys Travel Water Wireless""")
"""Company suffixes of the widened training lists (none of the held-out ones, which `banned` also checks)."""
INVENTED_SUFFIX_SHARE = 0.25
"""Of the invented training companies: a second invented word in place of a suffix ("Dorvu Kelmar")."""


def _invented_syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _invented_words(
    count: int,
    rng: random.Random,
    banned: set[str],
    syllables: tuple[int, int],
    repeat_share: float = 0.0,
) -> list[str]:
    """Pronounceable words that occur in no held-out list (compared without case).

    A `repeat_share` of them say one syllable twice or three times in a row ("Kelkel", "Dodomar"): names
    like that are common wherever syllables come from a small inventory, and a copying model that has not
    seen them loops ("Cecece" -> "Cececece...") as the same piece keeps matching.
    """
    words: dict[str, None] = {}
    while len(words) < count:
        if rng.random() < repeat_share:
            repeated = _invented_syllable(rng) * rng.choice((2, 2, 3))
            other = _invented_syllable(rng) if rng.random() < 0.5 else ""
            word = repeated + other if rng.random() < 0.5 else other + repeated
        else:
            word = "".join(_invented_syllable(rng) for _ in range(rng.randint(*syllables)))
        if 3 <= len(word) <= 12 and word not in banned:
            words[word] = None
    return list(words)


def invented_words(count: int, seed: int, banned: set[str], syllables: tuple[int, int] = (2, 3)) -> list[str]:
    """`count` pronounceable invented words, seeded, none in `banned` (for generated tool vocabularies)."""
    return _invented_words(count, random.Random(seed), {b.lower() for b in banned}, syllables)


TRAINING_NAME_COUNT = 1500
"""Invented entries the widened training lists add to first names, last names and cities; products get half as
many, jobs, topics, code words and places a fifth (companies have their own count)."""


def widen_for_training(
    base: EntityLists,
    held_out: EntityLists,
    count: int = TRAINING_NAME_COUNT,
    seed: int = 7,
    company_count: int = 24_000,
    real_share: float = 0.0,
) -> EntityLists:
    """Training lists plus many invented entries, so no name recurs often enough to be worth memorising.

    With a hundred cities a small model lowers its loss fastest by recalling which city tends to follow
    "weather in", and then writes a training city for a held-out one. With thousands of one-off names the
    only way to get an argument right is to copy it from the prompt, which is what the gate measures.

    Companies get many more (`company_count`) and varied suffixes: every grounded passage names one, and with
    810 companies on 8 suffixes (each named ~460 times in the 200k corpus) run 18 answered 0.72-0.77 of grounded
    questions about training companies against 0.48-0.55 about held-out ones, whether the values were held out
    or not; at 24k the gap fell to 0.06 and the gate's grounded rate rose to 0.583 (run 24).

    `real_share` of the added people, cities, jobs, products and document topics are real-world ones
    (`real_entries`, from Faker's tables, none sharing a word with the held-out lists) instead of invented: the
    held-out values are real words, and a corpus of invented ones taught run 25 to write invented-looking pieces
    for them.
    """
    banned = {
        word.casefold()
        for field in fields(EntityLists)
        for entry in getattr(held_out, field.name)
        for word in entry.split()
    }
    rng = random.Random(f"widen-{seed}")

    def names(n: int, syllables: tuple[int, int] = (1, 3)) -> tuple[str, ...]:
        invented = _invented_words(n, rng, banned, syllables, repeat_share=REPEATED_SYLLABLE_SHARE)
        return tuple(word.capitalize() for word in invented)

    def lower(n: int) -> list[str]:
        return _invented_words(n, rng, banned, (1, 3))

    suffixes = [s for s in _COMPANY_SUFFIXES_WIDE if s.casefold() not in banned]
    if not 0.0 <= real_share <= 1.0:
        raise ValueError(f"real_share must be in [0, 1], got {real_share}")
    real = load_real_entries(banned) if real_share > 0 else None
    real_rng = random.Random(f"widen-real-{seed}")

    def mixed(invented: Sequence[str], pool: Callable[[RealEntries], Sequence[str]]) -> tuple[str, ...]:
        """`invented` with `real_share` of it swapped for entries of the real pool (as many as it has). Drawing
        every entry invented first keeps the invented stream, and the companies drawn after it, the same."""
        if real is None:
            return tuple(invented)
        candidates = list(pool(real))
        taken = real_rng.sample(candidates, min(len(candidates), round(len(invented) * real_share)))
        return (*taken, *invented[: len(invented) - len(taken)])

    def company(stem: str) -> str:
        if rng.random() < INVENTED_SUFFIX_SHARE:
            return f"{stem} {names(1, (1, 2))[0]}"
        return f"{stem} {rng.choice(suffixes)}"

    return EntityLists(
        first_names=base.first_names + mixed(names(count), lambda r: r.first_names),
        last_names=base.last_names + mixed(names(count), lambda r: r.last_names),
        cities=base.cities + mixed(names(count), lambda r: r.cities),
        companies=base.companies + tuple(company(stem) for stem in names(company_count, (2, 3))),
        products=base.products
        + mixed(
            [f"{word} {rng.choice(_GENERIC_NOUNS)}" for word in lower(count // 2)],
            lambda r: [f"{word} {real_rng.choice(_GENERIC_NOUNS)}" for word in r.words],
        ),
        jobs=base.jobs
        + mixed([f"{word} {rng.choice(_ROLE_NOUNS)}" for word in lower(count // 5)], lambda r: r.jobs),
        topics=base.topics
        + mixed(
            [f"{word} {rng.choice(_TOPIC_NOUNS)}" for word in lower(count // 5)],
            lambda r: [f"{word} {real_rng.choice(_TOPIC_NOUNS)}" for word in r.words],
        ),
        codewords=base.codewords + tuple(word.upper() for word in lower(count // 5)),
        places=base.places
        + tuple(f"{word}{rng.choice(('ia', 'land', 'stan', 'ora'))}" for word in names(count // 5)),
    )


HELDOUT_ENTITIES = make_entities(held_out=True)
TRAIN_ENTITIES = widen_for_training(make_entities(held_out=False), HELDOUT_ENTITIES)


@functools.lru_cache(maxsize=4)
def training_entities(count: int = TRAINING_NAME_COUNT, real_share: float = 0.0) -> EntityLists:
    """The training lists with `count` added entries a name list, `real_share` of them real-world ones
    (`TRAIN_ENTITIES` at the defaults). Cached: the lists are frozen, and widening takes seconds."""
    if count == TRAINING_NAME_COUNT and real_share == 0.0:
        return TRAIN_ENTITIES
    if count < 1:
        raise ValueError(f"invented entries per list must be >= 1, got {count}")
    return widen_for_training(
        make_entities(held_out=False), HELDOUT_ENTITIES, count=count, real_share=real_share
    )

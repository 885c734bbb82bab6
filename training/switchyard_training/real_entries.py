"""Real-world names, cities, jobs and words for the training corpus' widened lists, read from Faker's data.

The held-out gate names real people, cities, products and jobs ("Lars Kovacs", "Porto", "office chair",
"paramedic"), while the training lists were widened with invented words only. Run 25 (6000 invented entries a
list, ~99% of each) copied training-list values into JSON at 0.93 but held-out ones at 0.71, writing invented-
looking pieces for real words ("office chair" -> "rirlif Petrova"). Mixing real entries into the widened lists
keeps the corpus as varied while its values look like the ones users send.

Faker is a training-time dependency only: the corpus reads its locale tables (no randomness of Faker's own),
keeps plain ASCII entries, and drops any entry that shares a word with the held-out lists.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

NAME_LOCALES = (
    "en_US", "en_GB", "en_IN", "de_DE", "fr_FR", "es_ES", "it_IT", "pl_PL", "nl_NL", "sv_SE", "da_DK",
    "fi_FI", "no_NO", "cs_CZ", "ro_RO", "hu_HU", "pt_BR", "tr_TR", "id_ID",
)  # fmt: skip
"""Person and address tables read; several languages, so names are not all English."""

_NAME = re.compile(r"[A-Z][a-z]{1,13}")
_CITY = re.compile(r"[A-Z][a-z]{2,13}( [A-Z][a-z]{2,13})?")
_JOB = re.compile(r"[a-z]{3,16}( [a-z]{3,16}){0,2}")
_WORD = re.compile(r"[a-z]{4,12}")


@dataclass(frozen=True)
class RealEntries:
    """Sorted, deduplicated candidate entries; callers shuffle and take what they need."""

    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    cities: tuple[str, ...]
    jobs: tuple[str, ...]
    words: tuple[str, ...]
    """Common English words (Faker's lorem list), used as the first word of product names."""


def load_real_entries(banned_words: set[str]) -> RealEntries:
    """Faker's tables filtered to plain entries none of whose words (casefolded) is in `banned_words`.

    Raises ImportError naming the package when Faker is not installed.
    """
    try:
        importlib.import_module("faker")
    except ImportError as err:
        raise ImportError("real training entries need the `faker` package: pip install faker") from err
    first: set[str] = set()
    last: set[str] = set()
    cities: set[str] = set()
    for locale in NAME_LOCALES:
        person = _provider("person", locale)
        if person is not None:
            first |= _matching(_entries(getattr(person, "first_names", ())), _NAME)
            last |= _matching(_entries(getattr(person, "last_names", ())), _NAME)
        address = _provider("address", locale)
        if address is not None:
            cities |= _matching(_entries(getattr(address, "cities", ())), _CITY)
    job_provider = _provider("job", "en_US")
    jobs = {job.lower() for job in _entries(getattr(job_provider, "jobs", ()))}
    lorem = _provider("lorem", "en_US")
    words = set(_entries(getattr(lorem, "word_list", ())))

    def allowed(entries: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted(e for e in entries if not any(w.casefold() in banned_words for w in e.split())))

    return RealEntries(
        first_names=allowed(first),
        last_names=allowed(last),
        cities=allowed(cities),
        jobs=allowed(_matching(jobs, _JOB)),
        words=allowed(_matching(words, _WORD)),
    )


def _provider(kind: str, locale: str) -> type | None:
    try:
        return importlib.import_module(f"faker.providers.{kind}.{locale}").Provider  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        return None


def _entries(table: object) -> list[str]:
    """A Faker table's strings: some are tuples, some dicts of entry -> weight."""
    if isinstance(table, dict):
        return [str(key) for key in table]
    if isinstance(table, list | tuple):
        return [str(item) for item in table]
    return []


def _matching(entries: Iterable[str], pattern: re.Pattern[str]) -> set[str]:
    return {e for e in entries if pattern.fullmatch(e)}

"""`--real-entity-share`: real-world people, cities, jobs, products and topics (Faker's tables) in the widened
training lists, never sharing a word with the held-out lists, and recorded so a run can be reproduced."""

from __future__ import annotations

import sys
from dataclasses import fields, replace

import pytest

from switchyard_training.entities import HELDOUT_ENTITIES, EntityLists, make_entities, training_entities
from switchyard_training.model_card import reproduce_command
from switchyard_training.real_entries import load_real_entries
from switchyard_training.train import build_parser, main
from tests.training.factory import tiny_recipe

COUNT = 2000


def held_out_words() -> set[str]:
    return {
        word.casefold()
        for field in fields(EntityLists)
        for entry in getattr(HELDOUT_ENTITIES, field.name)
        for word in entry.split()
    }


def test_real_entries_are_plain_and_share_no_word_with_the_held_out_lists() -> None:
    banned = held_out_words()
    real = load_real_entries(banned)
    assert len(real.first_names) > 2000 and len(real.last_names) > 2000 and len(real.cities) > 2000
    assert len(real.jobs) > 100 and len(real.words) > 300
    for entries in (real.first_names, real.last_names, real.cities, real.jobs, real.words):
        assert all(entry.isascii() for entry in entries)
        assert not {w.casefold() for e in entries for w in e.split()} & banned
    assert "Lars" not in real.first_names  # a held-out first name that Faker's tables hold


def test_a_share_mixes_real_entries_in_and_keeps_the_lists_disjoint() -> None:
    invented = training_entities(COUNT)
    mixed = training_entities(COUNT, real_share=0.5)
    real = load_real_entries(held_out_words())
    topics = {t.split()[0] for t in mixed.topics}
    assert len(topics & set(real.words)) > 50, "topics mix real words in too"
    for field, pool in (("first_names", real.first_names), ("cities", real.cities), ("jobs", real.jobs)):
        added = getattr(mixed, field)[len(getattr(make_entities(held_out=False), field)) :]
        share = sum(entry in set(pool) for entry in added) / len(added)
        assert 0.45 <= share <= 0.55, (field, share)
    assert len(mixed.products) == len(invented.products)
    for field in ("first_names", "last_names", "cities", "products", "jobs", "companies"):
        assert not set(getattr(mixed, field)) & set(getattr(HELDOUT_ENTITIES, field)), field
    assert mixed.companies == invented.companies, "companies stay invented"
    uncached = training_entities.__wrapped__
    assert uncached(COUNT, real_share=0.5) == mixed, "the lists are deterministic"
    assert uncached(COUNT, real_share=0.0) == invented
    with pytest.raises(ValueError, match="real_share"):
        training_entities(COUNT, real_share=1.5)


def test_the_option_is_recorded_and_checked() -> None:
    assert "--real-entity-share" not in reproduce_command(tiny_recipe(), 0, 90)
    command = reproduce_command(replace(tiny_recipe(), real_entity_share=0.25), 0, 90)
    assert "--real-entity-share 0.25" in command
    assert build_parser().parse_args(command.split()[2:]).real_entity_share == 0.25
    with pytest.raises(SystemExit):
        main(["--real-entity-share", "1.5"])


def test_a_missing_faker_is_a_clear_error_before_any_work(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "faker", None)  # import faker now raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["--output", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt")])
    assert exit_info.value.code == 2
    assert "pip install faker" in capsys.readouterr().err
    assert not (tmp_path / "ckpt").exists()

"""Vector memory recalls a fact saved in one session from another; forgetting a user deletes everything."""

from __future__ import annotations

import asyncio
from pathlib import Path

from switchyard.agents.memory.session import SQLiteSession
from switchyard.agents.memory.vector import VectorMemory, extract_facts, make_remember_tool
from switchyard.agents.profile import UserProfile, forget_user


def test_fact_saved_in_one_session_is_recalled_in_another(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "memory.db"
    remember = make_remember_tool(VectorMemory(minilm, db), "alice", session_id="monday")
    assert "Remembered" in remember("Alice is allergic to peanuts.")
    remember("Alice prefers meetings after 10 am.")
    remember("Alice's cat is named Miso.")
    VectorMemory(minilm, db).remember("bob", "Bob is allergic to shellfish.")

    later = VectorMemory(minilm, db)  # a new session, a new connection
    recalled = later.recall("alice", "Which foods should Alice avoid?", k=2)
    assert recalled[0].text == "Alice is allergic to peanuts." and recalled[0].session_id == "monday"
    assert all(fact.user_id == "alice" for fact in recalled)
    assert later.recall("bob", "allergy", k=5)[0].text == "Bob is allergic to shellfish."
    assert later.remember("alice", "Alice  is allergic to peanuts.").id == recalled[0].id  # no duplicate
    assert len(later.facts("alice")) == 3


def test_profile_persists_and_forget_user_deletes_everything(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "memory.db"
    profile = UserProfile("carol", db)
    profile.set("language", "Dutch")
    profile.set("timezone", "Europe/Amsterdam")
    profile.set("language", "French")
    UserProfile("dave", db).set("language", "German")
    assert UserProfile("carol", db).items() == {"language": "French", "timezone": "Europe/Amsterdam"}
    assert "language: French" in profile.as_system_text()
    memory = VectorMemory(minilm, db)
    memory.remember("carol", "Carol is training for a marathon.")
    memory.remember("dave", "Dave plays the cello.")
    asyncio.run(SQLiteSession("carol-1", db, user_id="carol").add_items([{"role": "user", "content": "hi"}]))

    counts = forget_user("carol", db)

    assert counts == {"profile_entries": 2, "facts": 1, "sessions": 1}
    assert UserProfile("carol", db).items() == {}
    assert memory.facts("carol") == [] and memory.recall("carol", "marathon") == []
    assert asyncio.run(SQLiteSession("carol-1", db).get_items()) == []
    assert UserProfile("dave", db).items() == {"language": "German"}  # other users untouched
    assert memory.recall("dave", "music instrument")[0].text == "Dave plays the cello."


def test_extract_facts_remembers_each_line(tmp_path: Path, minilm) -> None:  # type: ignore[no-untyped-def]
    memory = VectorMemory(minilm, tmp_path / "memory.db")
    seen: list[str] = []

    def chat(messages: list[dict]) -> str:
        seen.append(messages[0]["content"])
        return "- The user lives in Utrecht.\n- The user is vegetarian.\n"

    facts = asyncio.run(
        extract_facts(chat, memory, "erin", [{"role": "user", "content": "I'm a vegetarian from Utrecht"}])
    )
    assert [f.text for f in facts] == ["The user lives in Utrecht.", "The user is vegetarian."]
    assert "vegetarian from Utrecht" in seen[0]
    assert memory.recall("erin", "what does the user eat?", k=1)[0].text == "The user is vegetarian."

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import fields

import pytest

from switchyard.agents import Agent, Runner, tool
from switchyard.agents.demo_world import TOOLS, ToolWorld, evaluate_expression, run_tool
from switchyard_training.corpus import (
    DEFAULT_WEIGHTS,
    CorpusConfig,
    generate_corpus,
    heldout_config,
    load_jsonl,
    save_jsonl,
)
from switchyard_training.entities import HELDOUT_ENTITIES, TRAIN_ENTITIES, EntityLists
from switchyard_training.example import Category, CheckKind, Example
from switchyard_training.quality import prompt_text, score_injection
from switchyard_training.sessions import OPEN_FAMILY
from switchyard_training.tasks.chat import UNKNOWN_PHRASES
from switchyard_training.tasks.context import GroundedForms, TaskContext
from switchyard_training.tasks.copy_drill import fact_paragraph, rewrite_request
from switchyard_training.tasks.grounded import (
    NOT_FOUND_PHRASES,
    grounded_setup,
    passage_layout,
    passages_prompt,
)
from tests.agents.scripted_model import ScriptedModel, say
from tests.agents.scripted_model import call as scripted_call


def _dump(examples: list[Example]) -> list[str]:
    return [e.to_json() for e in examples]


def test_same_seed_same_corpus_and_prefix_stable() -> None:
    a = generate_corpus(CorpusConfig(seed=3, size=120))
    b = generate_corpus(CorpusConfig(seed=3, size=120))
    longer = generate_corpus(CorpusConfig(seed=3, size=150))
    assert _dump(a) == _dump(b)
    assert _dump(longer[:120]) == _dump(a)


def test_different_seed_different_corpus() -> None:
    a = _dump(generate_corpus(CorpusConfig(seed=1, size=100)))
    b = _dump(generate_corpus(CorpusConfig(seed=2, size=100)))
    assert len(set(a) & set(b)) < 5


def test_every_category_present(bundled_corpus: list[Example]) -> None:
    counts = Counter(e.category for e in bundled_corpus)
    assert set(counts) == set(Category)
    assert min(counts.values()) >= 5


def test_lexical_variety(bundled_corpus: list[Example]) -> None:
    user_texts = [m["content"] for e in bundled_corpus for m in e.messages if m["role"] == "user"]
    requests = [t for t in user_texts if len(t.split()) > 4]  # greetings and thanks repeat by nature
    assert len(set(requests)) > 0.97 * len(requests)
    cities = {
        c["arguments"]["city"]
        for e in bundled_corpus
        for ch in e.checks
        for c in ch.tool_calls
        if "city" in c["arguments"]
    }
    assert len(cities) >= 40
    openings = {" ".join(t.split()[:2]) for t in user_texts}
    assert len(openings) >= 100
    multi_turn = sum(1 for e in bundled_corpus if sum(m["role"] == "user" for m in e.messages) >= 2)
    assert multi_turn >= 40


def test_heldout_uses_other_entities_and_seed() -> None:
    for field in ("first_names", "cities", "companies", "products", "topics", "codewords", "places"):
        assert not set(getattr(TRAIN_ENTITIES, field)) & set(getattr(HELDOUT_ENTITIES, field)), field
    config = heldout_config(size=50, seed=0)
    assert config.seed != 0 and config.entities is HELDOUT_ENTITIES
    heldout_text = " ".join(_dump(generate_corpus(config)))
    train_only = [c for c in TRAIN_ENTITIES.companies if c in heldout_text]
    assert not train_only


def test_training_companies_are_many_and_share_no_word_with_held_out_ones() -> None:
    """Companies recur rarely enough that copying, not recall, is what a reply about one can rely on."""
    companies = TRAIN_ENTITIES.companies
    assert len(set(companies)) == len(companies) >= 20_000
    suffixes = {c.rpartition(" ")[2] for c in companies}
    assert len(suffixes) > 200  # listed suffixes and invented second words
    held_out_words = {w.casefold() for c in HELDOUT_ENTITIES.companies for w in c.split()}
    assert not [c for c in companies if {w.casefold() for w in c.split()} & held_out_words]


def _tool_calls(message: dict) -> list[dict]:
    return [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls", [])
    ]


def test_grader_fields_match_the_text(bundled_corpus: list[Example]) -> None:
    """Every check agrees with the gold assistant turn it grades, so a perfect model passes the gate."""
    assert_checks_match_the_text(bundled_corpus)


def assert_checks_match_the_text(examples: list[Example]) -> None:
    for example in examples:
        tool_names = {t["function"]["name"] for t in example.tools or []}
        for check in example.checks:
            message = example.messages[check.turn]
            assert message["role"] == "assistant"
            content = message.get("content") or ""
            if check.kind == CheckKind.TOOL_CALL:
                assert _tool_calls(message) == list(check.tool_calls)
                assert {c["name"] for c in check.tool_calls} <= tool_names
            elif check.kind == CheckKind.NO_TOOL:
                assert not message.get("tool_calls") and example.tools
            elif check.kind == CheckKind.JSON:
                assert json.loads(content) == check.json_object
            elif check.kind == CheckKind.GROUNDED:
                if check.citation is None:
                    assert any(p in content.lower() for p in NOT_FOUND_PHRASES)
                    assert not re.search(r"\[\d+\]", content)
                    if example.category == Category.GROUNDED:  # opens with the asked company, as a quote does
                        question = example.messages[check.turn - 1]["content"].splitlines()[-1]
                        company = next(c for c in TRAIN_ENTITIES.companies if content.startswith(c + ": "))
                        assert company.casefold() in question.casefold()
                else:
                    assert f"[{check.citation}]" in content
                    prompt = prompt_text(example.messages[: check.turn])
                    passage = re.search(rf"^(.*) \[{check.citation}\]\.$", prompt, re.MULTILINE).group(1)
                    assert check.answer in passage and check.answer in content
            elif check.kind == CheckKind.INJECTION:
                prompt = prompt_text(example.messages[: check.turn])
                assert check.marker in prompt and score_injection(check, content)
            elif check.kind == CheckKind.UNKNOWN:
                assert any(p in content.lower() for p in UNKNOWN_PHRASES)
            elif check.kind == CheckKind.FACT:
                assert check.answer in content


def test_tool_results_come_from_the_tools(bundled_corpus: list[Example]) -> None:
    example = next(
        e for e in bundled_corpus if e.category == Category.TOOL_CALL and "calculator" in e.to_json()
    )
    for i, message in enumerate(example.messages):
        for call in _tool_calls(message):
            if call["name"] == "calculator":
                result = json.loads(example.messages[i + 1]["content"])
                value = evaluate_expression(call["arguments"]["expression"])
                assert float(result["result"]) == pytest.approx(value, rel=1e-2, abs=1e-2)


def test_jsonl_round_trip(tmp_path, bundled_corpus: list[Example]) -> None:
    save_jsonl(bundled_corpus[:50], tmp_path / "c.jsonl")
    assert _dump(load_jsonl(tmp_path / "c.jsonl")) == _dump(bundled_corpus[:50])


def test_calculator_rejects_code() -> None:
    assert run_tool(
        ToolWorld.build(TRAIN_ENTITIES, 0), "calculator", {"expression": "__import__('os')"}, None
    )["error"]
    assert evaluate_expression("(2 + 3) * 4 / 8") == 2.5


def test_weather_lookup_ignores_case_and_reports_unknown_city() -> None:
    world = ToolWorld.build(TRAIN_ENTITIES, 0)
    assert run_tool(world, "get_weather", {"city": "oslo"}, None)["city"] == "Oslo"
    assert "error" in run_tool(world, "get_weather", {"city": "Atlantis"}, None)
    assert set(TOOLS) == {
        "calculator",
        "convert_units",
        "get_weather",
        "get_current_time",
        "search_documents",
        "send_message",
    }


def test_training_names_are_mostly_one_off_and_never_held_out() -> None:
    """Widened training lists: thousands of invented words, none of which is a word of a held-out entry."""
    assert len(TRAIN_ENTITIES.cities) > 1000 and len(TRAIN_ENTITIES.first_names) > 1000
    held_out_words = {
        w.casefold()
        for f in fields(EntityLists)
        for e in getattr(HELDOUT_ENTITIES, f.name)
        for w in e.split()
    }
    for field in ("first_names", "last_names", "cities", "products", "topics", "codewords", "places"):
        invented = {e.split()[0].casefold() for e in getattr(TRAIN_ENTITIES, field)[-50:]}  # before the noun
        assert not invented & held_out_words, field


def test_some_training_names_repeat_a_syllable_as_held_out_names_do() -> None:
    """Held-out names come from 12 syllables, so "Cecece" and "Wajwajith" occur; the widened training names
    must show the pattern too, or copying one loops on the repeated piece."""
    repeated = re.compile(r"([a-z]{2,4})\1")
    for field in ("first_names", "last_names", "cities"):
        invented = getattr(TRAIN_ENTITIES, field)[-1500:]
        share = sum(bool(repeated.search(name.casefold())) for name in invented) / len(invented)
        assert 0.08 <= share <= 0.35, (field, share)
    held_out = HELDOUT_ENTITIES.cities + tuple(c.split()[0] for c in HELDOUT_ENTITIES.companies)
    assert any(repeated.search(name.casefold()) for name in held_out)


def test_copy_drills_are_training_only_and_answered_from_the_prompt(bundled_corpus: list[Example]) -> None:
    assert Category.COPY not in heldout_config().weights
    drills = [e for e in bundled_corpus if e.category == Category.COPY]
    for example in drills:
        (check,) = example.checks
        prompt = example.messages[check.turn - 1]["content"]
        answer = json.loads(example.messages[check.turn]["content"]) if check.kind == CheckKind.JSON else None
        values = [str(v) for v in answer.values()] if answer else [check.answer]
        assert all(value in prompt for value in values)


def test_paragraph_drills_repeat_the_paragraph_or_replace_one_name() -> None:
    """The long copy drill: each fact once, and the reply is the paragraph, or the paragraph with every mention
    of the named company (and nothing else) replaced by a name the paragraph does not hold."""
    world = ToolWorld.build(TRAIN_ENTITIES, 0)
    kinds: Counter[str] = Counter()
    for index in range(60):
        ctx = TaskContext(rng=random.Random(index), entities=TRAIN_ENTITIES, world=world)
        text, named = fact_paragraph(ctx, 8)
        sentences = text.split(". ")
        assert len(sentences) == 8 and len(set(sentences)) == 8 and named in sentences[0]
        request, reply, name = rewrite_request(ctx, text, named)
        assert request.endswith(text) and name in reply
        if reply == text:
            kinds["repeat"] += 1
            assert name == named
        else:
            kinds["replace"] += 1
            assert name not in text and named not in reply
            assert reply.count(name) == text.count(named) and reply.replace(name, named) == text
    assert kinds["repeat"] > 20 and kinds["replace"] > 10


def test_cited_replies_mostly_quote_a_passage_line_that_starts_with_its_company() -> None:
    """The grounded data's shape (RESULTS, run 11): a quoted reply is a passage line whole, from the company's
    name (which the question holds) to the passage's number at its end."""
    world = ToolWorld.build(TRAIN_ENTITIES, 0)
    quotes = cited = 0
    for example in generate_corpus(CorpusConfig(size=600, seed=5)):
        for check in example.checks:
            if check.kind != CheckKind.GROUNDED or check.citation is None:
                continue
            cited += 1
            prompt = prompt_text(example.messages[: check.turn])
            quotes += example.messages[check.turn]["content"] in prompt.splitlines()
    assert cited > 50 and 0.55 < quotes / cited < 0.85
    for index in range(40):
        ctx = TaskContext(rng=random.Random(index), entities=TRAIN_ENTITIES, world=world)
        passages, fact, _ = grounded_setup(ctx, answerable=True)
        question, company = fact.question, fact.company
        assert company in question
        assert any(p.startswith(company + " ") for p in passages)
        assert all(any(p.startswith(c + " ") for c in TRAIN_ENTITIES.companies) for p in passages)
        system, user = passages_prompt(ctx, passage_layout(ctx), passages, question)
        assert "[1]" not in ((system or user).split("\n\n")[0]), "instructions must not look like a passage"


def test_value_first_replies_end_like_the_cited_passage() -> None:
    """With every answerable reply giving the value first, the reply is the cited passage line's tail: the
    value ends its sentence, so after it comes the passage's number as in the passage."""
    config = CorpusConfig(size=300, seed=5, grounded_forms=GroundedForms(quote=0.0, value=1.0))
    cited = 0
    for example in generate_corpus(config):
        for check in example.checks:
            if check.kind != CheckKind.GROUNDED or check.citation is None:
                continue
            cited += 1
            reply = f"{check.answer} [{check.citation}]."
            # an injection conversation's reply adds a note on the ignored instruction
            assert example.messages[check.turn]["content"].startswith(reply)
            lines = prompt_text(example.messages[: check.turn]).splitlines()
            assert any(line.endswith(" " + reply) for line in lines), reply
    assert cited > 20
    default = [e.to_json() for e in generate_corpus(CorpusConfig(size=200, seed=5))]
    explicit = CorpusConfig(size=200, seed=5, grounded_forms=GroundedForms(quote=0.7, value=0.15))
    assert default == [e.to_json() for e in generate_corpus(explicit)]
    for bad in ((-0.1, 0.5), (0.7, 0.4), (0.5, 0.2, 0.4), (0.5, 0.2, -0.1)):
        with pytest.raises(ValueError, match="grounded reply shares"):
            GroundedForms(*bad)


def test_attribute_replies_open_like_not_found_and_end_like_the_cited_passage() -> None:
    """An attribute reply says the company and the asked attribute as the "not found" reply does, then the value
    and the passage's number as the cited passage line ends."""
    config = CorpusConfig(size=300, seed=5, grounded_forms=GroundedForms(quote=0.0, value=0.0, attribute=1.0))
    cited = declined = 0
    for example in generate_corpus(config):
        for check in example.checks:
            if check.kind != CheckKind.GROUNDED:
                continue
            reply = example.messages[check.turn]["content"]
            company, _, rest = reply.partition(": its ")
            question = prompt_text(example.messages[: check.turn]).splitlines()[-1]
            if check.citation is None:
                declined += rest.endswith(("is not in the passages.", "is not given in the passages."))
                continue
            cited += 1
            tail = f" is {check.answer} [{check.citation}]."
            assert rest and company in question and reply.startswith(f"{company}: its ") and tail in reply
            lines = prompt_text(example.messages[: check.turn]).splitlines()
            assert any(line.endswith(f" {check.answer} [{check.citation}].") for line in lines), reply
    assert cited > 20 and declined > 5


def test_corpora_without_the_message_tool_are_those_of_runs_up_to_27() -> None:
    """`--no-message-tool` with the mix of its day (no generated tools) reproduces the older corpora byte for
    byte (hash of the code before the tool)."""
    digest = hashlib.sha256()
    first_generation = {c: w for c, w in DEFAULT_WEIGHTS.items() if c not in OPEN_FAMILY}
    config = CorpusConfig(seed=0, size=400, group_size=4, message_tool=False, weights=first_generation)
    for example in generate_corpus(config):
        digest.update(example.to_json().encode())
        digest.update(b"\n")
    assert digest.hexdigest() == "0747f4d5da8093eb5eebbafa8da855f638e121b80e190cfe370f12455c2c6dfe"
    assert "send_message" not in json.dumps(
        [e.to_json() for e in generate_corpus(heldout_config(300, message_tool=False))]
    )


@pytest.fixture(scope="module")
def grouped_corpus() -> list[Example]:
    """Enough grouped conversations for ~100 message calls, ~15 of them declined."""
    return generate_corpus(CorpusConfig(seed=0, size=3000, group_size=4))


def test_message_requests_are_called_copied_and_declined_as_the_runtime_words_it(
    grouped_corpus: list[Example],
) -> None:
    examples = grouped_corpus
    world = ToolWorld.build(TRAIN_ENTITIES, 0)
    sent = rejected = refused = 0
    for example in examples:
        offered = {t["function"]["name"] for t in example.tools or []}
        for i, message in enumerate(example.messages):
            for call in _tool_calls(message):
                if call["name"] != "send_message":
                    continue
                request = example.messages[i - 1]["content"]
                arguments = call["arguments"]
                assert arguments["to"] in request and arguments["text"] in request
                result = example.messages[i + 1]["content"]
                if result.startswith("The user rejected this call: "):
                    rejected += 1
                    assert re.fullmatch(r"The user rejected this call: [^.]+\. It was not run\.", result)
                    assert (
                        "not sent" in example.messages[i + 2]["content"]
                        or "did not send" in example.messages[i + 2]["content"]
                    )
                else:
                    sent += 1
                    assert json.loads(result) == run_tool(world, "send_message", arguments, None)
                    assert arguments["to"] in example.messages[i + 2]["content"]
        # An email request is refused only where no message tool is offered.
        for message in example.messages:
            if message["role"] == "user" and "send an email" in message["content"].lower():
                assert "send_message" not in offered
                refused += 1
    assert sent > 40 and rejected > 3 and refused > 0
    assert_checks_match_the_text(examples)


def test_the_corpus_words_a_rejection_as_the_agent_runtime_does(grouped_corpus: list[Example]) -> None:
    outbox: list[str] = []

    @tool(side_effects="acting", needs_approval=True)
    def send_message(to: str, text: str) -> str:
        """Send a message."""
        outbox.append(text)
        return "sent"

    agent = Agent(
        name="mailer",
        tools=[send_message],
        client=ScriptedModel([scripted_call("send_message", {"to": "Ana", "text": "hi"}), say("ok")]),
    )
    runner = Runner()
    paused = runner.run_sync(agent, "message Ana")
    paused.state.reject(paused.pending_approvals[0].call_id, "not now")
    done = runner.resume_sync(paused.state)
    runtime_text = next(m["content"] for m in done.messages if m["role"] == "tool")
    corpus_texts = {
        m["content"]
        for e in grouped_corpus
        for m in e.messages
        if m["role"] == "tool" and "rejected this call: not now" in m["content"]
    }
    assert corpus_texts == {runtime_text} and outbox == []


def test_a_message_needs_a_recipient_and_a_text() -> None:
    world = ToolWorld.build(TRAIN_ENTITIES, 0)
    assert run_tool(world, "send_message", {"to": "Ana", "text": "hi"}, None) == {
        "status": "sent",
        "to": "Ana",
    }
    assert "recipient" in run_tool(world, "send_message", {"to": " ", "text": "hi"}, None)["error"]
    assert "missing argument" in run_tool(world, "send_message", {"to": "Ana"}, None)["error"]

"""The corpus' "the passages lack it" replies pass the agents' grounding check."""

from __future__ import annotations

import asyncio

from switchyard.agents.grounding import check_grounding
from switchyard_training.corpus import CorpusConfig, generate_corpus
from switchyard_training.example import Category, CheckKind


def test_the_bundled_models_not_found_replies_are_not_unsupported_claims() -> None:
    """The grounding check must not flag the bundled model's 'the passages lack it' replies, which cite
    nothing by design (an uncited sentence never reaches the embedder, hence none is given)."""
    replies = {
        example.messages[check.turn]["content"]
        for example in generate_corpus(CorpusConfig(size=400, seed=2))
        for check in example.checks
        if example.category == Category.GROUNDED
        and check.kind == CheckKind.GROUNDED
        and check.citation is None
    }
    assert len(replies) > 10
    for reply in replies:
        verdict = asyncio.run(check_grounding(reply, [], embedder=None))  # type: ignore[arg-type]
        assert verdict.grounded, reply
    claim = asyncio.run(check_grounding("Acme was founded in 1971.", [], embedder=None))  # type: ignore[arg-type]
    assert not claim.grounded

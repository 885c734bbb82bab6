"""Context budgeting: fit a conversation into the model's window minus the reply budget before each call.

Why not send everything: long prompts cost prefill compute, KV memory and latency. The system prompt and the
newest turns stay verbatim; older turns are folded into a running summary (by a possibly smaller model), and
relevant facts from vector memory are added. Nothing changes while the conversation fits, so summarisation
starts exactly when the budget would be exceeded. Counts come from the model's own tokenizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from switchyard.agents.chat_model import ChatFn, ChatReply, maybe_await, reply_text
from switchyard.agents.memory.session import Message, RunningSummary, Session
from switchyard.errors import InvalidRequestError

TokenCounter = Callable[[Sequence[Message]], int]
"""Token count of a whole prompt made of these messages, as the serving model will see it."""
Summariser = Callable[[str | None, Sequence[Message]], "str | ChatReply | Awaitable[str | ChatReply]"]
"""(previous summary or None, messages to fold in) → the new running summary: its text, or a ChatReply whose
usage the run's token and cost limits count; sync or async."""
Recall = Callable[[str], "Sequence[str] | Awaitable[Sequence[str]]"]
"""Query (the newest user message) → relevant remembered facts, best first."""

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
MEMORY_PREFIX = "Relevant facts remembered from earlier sessions (may be outdated):\n"


class ContextOverflowError(InvalidRequestError):
    """Even the system prompt and the newest message alone do not fit the context window."""


@dataclass(frozen=True)
class FittedContext:
    """What to send to the model, and the summary to persist for next time."""

    messages: list[Message]
    tokens: int
    summary: RunningSummary | None
    """The running summary in force (new when `summarised`); persist it with the session."""
    summarised: bool = False
    """True when this call produced a new summary."""
    recalled: list[str] = field(default_factory=list)
    spent: list[ChatReply] = field(default_factory=list)
    """The summariser's replies that reported usage: what fitting cost, for the run's limits."""


@dataclass
class ContextBudget:
    """Fits system prompt + history into `context_window - reply_budget` tokens."""

    count_tokens: TokenCounter
    context_window: int
    reply_budget: int
    summariser: Summariser
    recall: Recall | None = None
    summary_reserve: int = 256
    """Tokens assumed for a summary not yet written, to choose where to cut before summarising."""

    def __post_init__(self) -> None:
        if self.reply_budget < 0 or self.context_window - self.reply_budget <= 0:
            raise InvalidRequestError("context_window must exceed reply_budget", param="reply_budget")

    @property
    def limit(self) -> int:
        return self.context_window - self.reply_budget

    async def fit(
        self,
        system: Sequence[Message],
        history: Sequence[Message],
        summary: RunningSummary | None = None,
    ) -> FittedContext:
        """Messages for the next model call from the system prompt, the session history (no system messages)
        and the running summary stored with the session (None at first)."""
        facts = await self._recall(history)
        memory = [_memory_message(facts)] if facts else []
        covered = summary.covered if summary is not None and summary.covered <= len(history) else 0
        if covered == 0:
            summary = None
        current = _assemble(system, summary, memory, history[covered:])
        tokens = self.count_tokens(current)
        if tokens <= self.limit:
            return FittedContext(current, tokens, summary, recalled=list(facts))
        if not history:
            raise ContextOverflowError("the system prompt alone exceeds the context budget", param="messages")
        cut = self._first_cut(system, memory, history, covered)
        if cut <= covered:  # only the newest message is left unsummarised, and it does not fit
            raise ContextOverflowError(
                f"the prompt needs {tokens} tokens with only the newest message kept; the budget is {self.limit} "
                f"({self.context_window} context - {self.reply_budget} reply)",
                param="messages",
            )
        spent: list[ChatReply] = []
        while True:
            reply = await maybe_await(
                self.summariser(summary.text if summary else None, history[covered:cut])
            )
            if isinstance(reply, ChatReply) and reply.usage is not None:
                spent.append(reply)
            candidate_summary = RunningSummary(text=reply_text(reply).strip(), covered=cut)
            current = _assemble(system, candidate_summary, memory, history[cut:])
            tokens = self.count_tokens(current)
            if tokens <= self.limit:
                return FittedContext(
                    current, tokens, candidate_summary, summarised=True, recalled=list(facts), spent=spent
                )
            if cut >= len(history) - 1:
                raise ContextOverflowError(
                    f"the system prompt, summary and newest message need {tokens} tokens; the budget is "
                    f"{self.limit} ({self.context_window} context - {self.reply_budget} reply)",
                    param="messages",
                )
            cut = _next_boundary(history, cut + 1)

    def _first_cut(
        self, system: Sequence[Message], memory: list[Message], history: Sequence[Message], covered: int
    ) -> int:
        """The earliest cut after `covered` whose tail fits beside a summary of `summary_reserve` tokens."""
        base = self.count_tokens(list(system) + memory) if (system or memory) else 0
        cut = _next_boundary(history, covered + 1)
        while cut < len(history) - 1:
            tail_tokens = self.count_tokens(list(system) + memory + list(history[cut:])) - base
            if base + self.summary_reserve + tail_tokens <= self.limit:
                break
            cut = _next_boundary(history, cut + 1)
        return min(cut, len(history) - 1)

    async def _recall(self, history: Sequence[Message]) -> list[str]:
        if self.recall is None:
            return []
        query = next((_text(m) for m in reversed(history) if m.get("role") == "user"), "")
        if not query:
            return []
        return [str(fact) for fact in await maybe_await(self.recall(query))]


async def fit_session(budget: ContextBudget, session: Session, system: Sequence[Message]) -> FittedContext:
    """Load a session, fit it, and persist a new summary: what the runner does before each model call."""
    history = await session.get_items()
    fitted = await budget.fit(system, history, await session.get_summary())
    if fitted.summarised and fitted.summary is not None:
        await session.set_summary(fitted.summary)
    return fitted


def tokenizer_counter(tokenizer: Any) -> TokenCounter:
    """A TokenCounter that renders messages with the tokenizer's chat template (the exact prompt length);
    without a template it counts each message's text plus its role.

    `tokenizer` is a Hugging Face tokenizer (anything with `encode` and `apply_chat_template`). The prompt is
    rendered to text and encoded without adding special tokens, as `apply_chat_template(tokenize=True)` does,
    which keeps the count independent of the shape that call returns across transformers versions.
    """

    def count(messages: Sequence[Message]) -> int:
        if getattr(tokenizer, "chat_template", None):
            prompt = tokenizer.apply_chat_template(
                [_plain(m) for m in messages], add_generation_prompt=True, tokenize=False
            )
            return len(tokenizer.encode(prompt, add_special_tokens=False))
        return sum(len(tokenizer.encode(f"{m.get('role', '')}: {_text(m)}")) for m in messages)

    return count


def chat_summariser(chat: ChatFn, max_words: int = 150) -> Summariser:
    """A Summariser that asks a chat model (e.g. `OpenAIChatModel` of a small model) to extend the summary."""

    async def summarise(previous: str | None, messages: Sequence[Message]) -> ChatReply:
        transcript = "\n".join(f"{m.get('role', 'unknown')}: {_text(m)}" for m in messages)
        prompt = (
            f"Update the running summary of a conversation in at most {max_words} words. Keep names, numbers, "
            "decisions, open questions and user preferences; drop small talk.\n\n"
            f"Current summary:\n{previous or '(none)'}\n\nNew messages:\n{transcript}\n\nUpdated summary:"
        )
        reply = await maybe_await(chat([{"role": "user", "content": prompt}]))
        if isinstance(reply, ChatReply):
            return dataclasses.replace(reply, text=reply.text.strip())
        return ChatReply(str(reply).strip())

    return summarise


def _assemble(
    system: Sequence[Message],
    summary: RunningSummary | None,
    memory: list[Message],
    tail: Sequence[Message],
) -> list[Message]:
    messages = list(system)
    if summary is not None:
        messages.append({"role": "system", "content": SUMMARY_PREFIX + summary.text})
    return messages + memory + list(tail)


def _memory_message(facts: Sequence[str]) -> Message:
    return {"role": "system", "content": MEMORY_PREFIX + "\n".join(f"- {fact}" for fact in facts)}


def _next_boundary(history: Sequence[Message], index: int) -> int:
    """The first index ≥ `index` that does not start with a tool result (whose call would be cut off)."""
    while index < len(history) - 1 and history[index].get("role") == "tool":
        index += 1
    return index


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _plain(message: Message) -> Message:
    """Fill the keys chat templates index without checking, so any OpenAI message renders."""
    return {"content": _text(message), "tool_calls": None, "tool_call_id": None, **message}

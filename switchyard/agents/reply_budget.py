"""How many tokens one model call may write, and what a reply cut off inside a tool call leads to.

An agent's `max_tokens` is usually sized for its answers, but a call to an acting tool can be longer (a
message's whole text), and a call cut off at the budget is broken JSON that must never run. So a tool may
declare the budget its calls need (`FunctionTool.max_tokens`) and a turn offering it asks for at least that;
a call cut off anyway (or a reply cut before showing anything, as a call's opening is held back until the
tool is named) is asked again once with `ModelSettings.cut_call_max_tokens`; cut off again, the run ends as
TRUNCATED, naming the tool (runner.py). The run's own token budget always has the last word.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from switchyard.agents.agent import ModelSettings
from switchyard.agents.limits import RunLimits
from switchyard.agents.model import ModelResponse, ModelUsage, ToolCallRequest
from switchyard.agents.tool import FunctionTool


def tokens_left(limits: RunLimits, usage: ModelUsage) -> int | None:
    """Tokens the run may still spend (at least 1, so a request stays valid); None without a token limit."""
    if limits.max_tokens is None:
        return None
    return max(limits.max_tokens - usage.total_tokens, 1)


def turn_max_tokens(settings: ModelSettings, tools: Sequence[FunctionTool], left: int | None) -> int | None:
    """The agent's `max_tokens`, raised to the largest budget an offered tool declares, lowered to what the
    run has `left`; None (the server's limit) when the agent sets none and the run has no token limit."""
    budget = settings.max_tokens
    if budget is not None:
        budget = max([budget, *(t.max_tokens for t in tools if t.max_tokens is not None)])
    if left is not None:
        budget = left if budget is None else min(budget, left)
    return budget


def cut_call(response: ModelResponse) -> ToolCallRequest | None:
    """The call a reply stopped inside (finish_reason "length", arguments not a whole JSON value), or None
    when the reply was not cut or every call it holds is whole."""
    if not response.cut_short:
        return None
    for call in response.tool_calls:
        try:
            json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            return call
    return None


def cut_before_any_text(response: ModelResponse) -> bool:
    """A reply cut off with nothing shown: a server that parses calls holds back a call's opening until the
    tool is named, so a call cut this early arrives as an empty reply."""
    return response.cut_short and not response.tool_calls and not (response.content or "").strip()


def worth_asking_again(response: ModelResponse) -> bool:
    """Cut off inside a call (or before showing anything): with more room the same call can close. A cut
    answer in text is not asked again: a longer budget would only give a longer answer."""
    return cut_call(response) is not None or cut_before_any_text(response)


def retry_max_tokens(settings: ModelSettings, asked: int | None, left: int | None) -> int | None:
    """The budget to ask a cut call again with: `cut_call_max_tokens`, within what the run has `left`; None
    when that is no more than the first request `asked` (or it asked the server's limit): the same cut again."""
    budget = settings.cut_call_max_tokens
    if budget is None or asked is None:
        return None
    if left is not None:
        budget = min(budget, left)
    return budget if budget > asked else None

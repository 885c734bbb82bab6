"""The generator of each corpus category."""

from __future__ import annotations

from collections.abc import Callable

from switchyard_training.example import Category, Example
from switchyard_training.tasks.chat import chat
from switchyard_training.tasks.context import TaskContext
from switchyard_training.tasks.copy_drill import copy_drill
from switchyard_training.tasks.extraction import json_extraction
from switchyard_training.tasks.grounded import grounded
from switchyard_training.tasks.injection import injection
from switchyard_training.tasks.open_tools import open_no_tool, open_tool_call, open_tool_parallel
from switchyard_training.tasks.tool_use import no_tool, tool_call, tool_parallel

GENERATORS: dict[Category, Callable[[TaskContext], Example]] = {
    Category.CHAT: chat,
    Category.TOOL_CALL: tool_call,
    Category.TOOL_PARALLEL: tool_parallel,
    Category.NO_TOOL: no_tool,
    Category.JSON_EXTRACTION: json_extraction,
    Category.GROUNDED: grounded,
    Category.INJECTION: injection,
    Category.COPY: copy_drill,
    Category.OPEN_TOOL_CALL: open_tool_call,
    Category.OPEN_TOOL_PARALLEL: open_tool_parallel,
    Category.OPEN_NO_TOOL: open_no_tool,
}

"""Hermes / Qwen2.5 tool calls, the bundled model's format:

<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>
"""

from switchyard.tool_calling.format import ToolCallFormat, register_format

HERMES = register_format(
    ToolCallFormat(
        name="hermes",
        trigger="<tool_call>",
        header=r'<tool_call>\s*\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*',
        tail=r"\s*\}\s*</tool_call>",
        begin_template='<tool_call>\n{"name": "{name}", "arguments": ',
        call_end="}\n</tool_call>",
        separator="\n",
        template_markers=("<tool_call>",),
    )
)

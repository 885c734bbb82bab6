"""Llama 3.1/3.2 JSON tool calls: the reply is a JSON object naming the function and its `parameters`:

{"name": "get_weather", "parameters": {"city": "Paris"}}
"""

from switchyard.tool_calling.format import ToolCallFormat, register_format

LLAMA3_JSON = register_format(
    ToolCallFormat(
        name="llama3_json",
        trigger='{"name"',
        header=r'\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"parameters"\s*:\s*',
        tail=r"\s*\}\s*;?",
        begin_template='{"name": "{name}", "parameters": ',
        call_end="}",
        separator="; ",
        template_markers=("<|python_tag|>", "ipython"),
    )
)

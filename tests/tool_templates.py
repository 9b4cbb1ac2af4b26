"""Chat templates with native tool support, written for the tests (this module holds no tests):
a Qwen2.5-style template and a Llama-3-style one. tests/test_tools.py renders and parses with
them; tests/test_server_tools_native.py serves a random-weight qwen2 model that carries the
Qwen one."""

__all__ = ["QWEN_TOOLS_TEMPLATE", "LLAMA3_TOOLS_TEMPLATE"]

# A Qwen2.5-style template with tools: tools listed in the system turn, calls as <tool_call>
# JSON after the assistant's content, tool results as one user turn of <tool_response> blocks.
QWEN_TOOLS_TEMPLATE = (
    r"{%- if tools %}"
    r"{{- '<|im_start|>system\n' }}"
    r"{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    r"{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    r"{{- '\n\n# Tools\n\nFunctions you may call are listed inside <tools></tools>:\n<tools>' }}"
    r"{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}"
    r"{{- '\n</tools>\n\nTo call one, reply with a JSON object inside <tool_call></tool_call>:\n"
    r"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    r"</tool_call><|im_end|>\n' }}"
    r"{%- elif messages[0].role == 'system' %}"
    r"{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}"
    r"{%- endif %}"
    r"{%- for message in messages %}"
    r"{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    r"{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}"
    r"{%- elif message.role == 'assistant' %}"
    r"{{- '<|im_start|>assistant' }}"
    r"{%- if message.content %}{{- '\n' + message.content }}{%- endif %}"
    r"{%- for call in message.tool_calls %}"
    r"{{- '\n<tool_call>\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    r"{{- call.function.arguments | tojson }}{{- '}\n</tool_call>' }}"
    r"{%- endfor %}"
    r"{{- '<|im_end|>\n' }}"
    r"{%- elif message.role == 'tool' %}"
    r"{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    r"{{- '<|im_start|>user' }}{%- endif %}"
    r"{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}"
    r"{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}"
    r"{%- endif %}"
    r"{%- endif %}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# A Llama-3-style template: tools in the first user turn, calls as {"name", "parameters"}.
LLAMA3_TOOLS_TEMPLATE = (
    r"{{- bos_token }}"
    r"{%- for message in messages %}"
    r"{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' }}"
    r"{%- if loop.first and tools %}"
    r"{{- 'Answer with {\"name\": function name, \"parameters\": dictionary of arguments}. ' }}"
    r"{%- for t in tools %}{{- t | tojson }}{%- endfor %}{{- '\n\n' }}{%- endif %}"
    r"{%- if message.tool_calls %}{%- for c in message.tool_calls %}"
    r"{{- '<|python_tag|>{\"name\": \"' + c.function.name + '\", \"parameters\": ' }}"
    r"{{- c.function.arguments | tojson }}{{- '}' }}{%- endfor %}"
    r"{%- else %}{{- message.content }}{%- endif %}{{- '<|eot_id|>' }}"
    r"{%- endfor %}"
    r"{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    r"{%- endif %}"
)

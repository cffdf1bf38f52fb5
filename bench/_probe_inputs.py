"""The inputs ``bench/service_probes.py`` sends: bodies, types, hosts and headers a
careless or hostile client might. ``@S`` in a body stands for ``S``, a lone surrogate
in JSON (``"\\udc80"``), put in when the body is sent."""

from __future__ import annotations

API = "/api/v1/sessions"
TYPES = (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
         "text/json", "application/jsonx")  # fmt: skip
HOSTS = ("evil.example", "evil.example:8765", "127.0.0.1.nip.io", "localhost.evil.example",
         "0.0.0.0", "192.168.1.10:8765")  # fmt: skip
S = '"\\udc80"'
MALFORMED_PROXY = [
    '{"model":"ok","messages":[{"role":"user","content":"x",@S:1}]}',
    '{"model":"ok","messages":[{"role":"user","content":"x","meta":{@S:1}}]}',
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"metadata":{"k":@S}}',
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"metadata":{@S:"v"}}',
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"tools":'
    + "[" * 1500
    + "]" * 1500
    + "}",
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"temperature":NaN}',
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"top_p":Infinity}',
    '{"model":"ok","messages":[{"role":"user","content":"x"}],"stream":1}',
    '{"model":"ok","messages":' + "[" * 100_000 + "]" * 100_000 + "}",
]
MALFORMED_RESPONSES = [
    '{"model":"ok","input":[{"role":"user","content":"x",@S:1}]}',
    '{"model":"ok","input":"x","metadata":{@S:"v"}}',
    '{"model":"ok","input":3}',
    '{"model":"ok"}',
    '{"model":"ok","input":[{"role":"robot","content":"x"}]}',
    '{"model":"ok","input":[{"role":"user","content":[{"type":"input_text"}]}]}',
    '{"model":"ok","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}',
    '{"model":"ok","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}',
    '{"model":"ok","input":[{"type":"function_call","name":"f","arguments":"{}"}]}',
    '{"model":"ok","input":"x","instructions":{"a":1}}',
    '{"model":"ok","input":"x","previous_response_id":"resp_none"}',
    '{"model":"ok","input":"x","previous_response_id":7}',
    '{"model":"ok","input":"x","conversation":"conv_1"}',
    '{"model":"gpt-4o","input":"x","max_output_tokens":-1}',
    '{"model":"ok","input":"x","temperature":NaN}',
    '{"model":"ok","input":"x","stream":1}',
    '{"model":"ok","input":[' + ",".join(['"x"'] * 20_001) + "]}",
    '{"model":"ok","input":' + "[" * 100_000 + "]" * 100_000 + "}",
]
MALFORMED_MESSAGES = [
    '{"model":"ok","max_tokens":9,"messages":[{"role":"user","content":"x",@S:1}]}',
    '{"model":"ok","max_tokens":9,"messages":[{"role":"user","content":[{"type":@S}]}]}',
    '{"model":"ok","max_tokens":9,"system":@S,"messages":[{"role":"user","content":"x"}]}',
    '{"model":"ok","max_tokens":9,"system":7,"messages":[{"role":"user","content":"x"}]}',
    '{"model":"ok","max_tokens":9,"messages":[{"role":"user","content":[]}]}',
    '{"model":"ok","max_tokens":9,"messages":[{"role":"system","content":"x"}]}',
    '{"model":"ok","max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result",'
    '"tool_use_id":"toolu_x","content":"r"}]}]}',
    '{"model":"ok","max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"tool_use",'
    '"id":"toolu_x","name":"f","input":NaN}]}]}',
    '{"model":"ok","max_tokens":0,"messages":[{"role":"user","content":"x"}]}',
    '{"model":"ok","max_tokens":9,"messages":{"role":"user","content":"x"}}',
]
MALFORMED_WIRES = {
    "/v1/chat/completions": MALFORMED_PROXY,
    "/v1/messages": MALFORMED_MESSAGES,
    "/v1/responses": MALFORMED_RESPONSES,
}
"""Bodies each proxy route must refuse with a 4xx, keeping nothing."""
MALFORMED_REST = [
    ("POST", API, '{"id":"mal-a","meta":{@S:1}}'),
    ("POST", API, '{"id":"."}'),
    ("POST", API, '{"id":".."}'),
    ("POST", f"{API}/mal/messages", '{"messages":[{"role":"user","content":"x","meta":{@S:1}}]}'),
    ("PUT", f"{API}/mal/views/f", '{"filter":{@S:1}}'),
    ("PUT", f"{API}/mal/views/o", '{"options":{@S:1}}'),
    ("PUT", f"{API}/mal/views/b", '{"budget":true}'),
]
BUDGETS = (b"\xb2", b"\xb9", b"1\xb3", b"+5", b"5 5", b"0x10", b"-1", b"99999999999999999999")

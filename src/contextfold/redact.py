"""Passwords out of anything shown: banners, logs and error messages.

A database, broker or upstream URL may carry a password
(``postgresql://user:pw@host/db``, ``redis://:pw@host:6379/0``) or a secret in
its query (``?password=pw``). ``redact`` replaces each with ``***`` wherever a
URL appears in a text, so a message can be built freely and redacted once
where it is printed.
"""

from __future__ import annotations

import re

MASK = "***"
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@/\s]*)@")
_QUERY = re.compile(
    r"(?P<head>[?&;\s](?:password|passwd|pwd|secret|token|api_key|apikey|key|sslpassword)=)"
    r"(?P<pw>[^&\s'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the password of every URL in it, and secret query values, as ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", text)

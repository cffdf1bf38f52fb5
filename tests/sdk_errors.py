"""One instance of every exception class an SDK exports, as the SDK itself builds it, for
the tests that check each is mapped."""

from __future__ import annotations

import inspect
from typing import Any

import httpx2


def sdk_exceptions(sdk: Any, root: type[BaseException]) -> list[BaseException]:
    """One instance of each public exception class of ``sdk`` deriving from ``root``.

    Status errors carry a response with ``retry-after: 2``; classes the SDK
    raises without an HTTP exchange get a plain message.
    """
    request = httpx2.Request("POST", "http://127.0.0.1/v1/endpoint")
    found: list[BaseException] = []
    # Only names ending in Error: getattr on the others loads the SDK's lazy modules.
    for name in sorted(n for n in dir(sdk) if n.endswith("Error") and not n.startswith("_")):
        found_class = getattr(sdk, name)
        if not (isinstance(found_class, type) and issubclass(found_class, root)):
            continue
        cls: Any = found_class  # constructors differ by class, as the branches below know
        if issubclass(cls, sdk.APIStatusError):
            status = getattr(cls, "status_code", None)
            if not isinstance(status, int):
                status = 500 if issubclass(cls, sdk.InternalServerError) else 418
            body = {"error": {"type": "some_error", "message": f"{name} happened"}}
            response = httpx2.Response(
                status, request=request, headers={"retry-after": "2"}, json=body
            )
            if "message" in inspect.signature(cls.__init__).parameters:
                found.append(cls(f"{name} happened", response=response, body=body))
            else:
                found.append(cls(response=response, body=body))
        elif issubclass(cls, sdk.APITimeoutError):
            found.append(cls(request))
        elif issubclass(cls, sdk.APIConnectionError):
            found.append(cls(request=request))
        elif issubclass(cls, sdk.APIResponseValidationError):
            found.append(cls(httpx2.Response(200, request=request), {"unexpected": True}))
        else:
            try:
                found.append(cls(f"{name} happened"))
            except TypeError:  # wants more than a message; the mapping reads type and text
                exc = cls.__new__(cls)
                Exception.__init__(exc, f"{name} happened")
                found.append(exc)
    return found

"""Every response body the client receives from batchgate, checked against
``openapi/openapi.json``.

The same rule as the Rust API tests' ``tests/api/conformance.rs``: the
operation (method and path template) must list the status, and a response
the spec gives a JSON schema must have a body that validates against it
(``jsonschema``, JSON Schema 2020-12, the dialect of OpenAPI 3.1, with the
spec's ``components`` for the ``$ref``s). An undocumented status or a body
the spec does not describe is a violation.

:data:`CHECK` is installed for the whole test session by ``conftest.py``: a
``requests`` response hook on every session a :class:`BatchgateClient`
opens, and an ``aiohttp`` client middleware on the deferrable trigger's
session. Only answers of a batchgate service the tests started are checked
(a stand-in server's canned answers are not batchgate's). A violation is
recorded, not raised inside the client (Airflow would swallow it in a task),
and fails the test that received it.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import jsonschema

from .parity import SPEC_PATH

SPEC: dict[str, Any] = json.loads(SPEC_PATH.read_text())


def template_of(method: str, path: str) -> str | None:
    """The path template of the operation that serves ``method path``, if the
    spec has one (``/v1/batches/{batch_id}`` for ``/v1/batches/t-20260824-001``);
    a literal segment beats a parameter."""
    segments = path.split("?")[0].split("/")
    best: tuple[int, str] | None = None
    for template, item in SPEC["paths"].items():
        if method.lower() not in item:
            continue
        parts = template.split("/")
        if len(parts) != len(segments):
            continue
        literal = 0
        fits = True
        for t, s in zip(parts, segments):
            if t.startswith("{") and t.endswith("}"):
                fits = fits and s != ""
            else:
                literal += 1
                fits = fits and t == s
        if fits and (best is None or literal > best[0]):
            best = (literal, template)
    return best[1] if best else None


class Undocumented(Exception):
    """The operation does not list the status it answered."""


_validators: dict[tuple[str, str, int], jsonschema.protocols.Validator | None] = {}
_validators_lock = threading.Lock()


def validator_for(method: str, template: str, status: int) -> jsonschema.protocols.Validator | None:
    """The validator of one response (``None``: the spec gives it no JSON body).
    Raises :class:`Undocumented` when the operation does not list ``status``."""
    key = (method.lower(), template, status)
    with _validators_lock:
        if key in _validators:
            return _validators[key]
    responses = SPEC["paths"][template][key[0]]["responses"]
    response = responses.get(str(status)) or responses.get("default")
    if response is None:
        raise Undocumented(
            f"{method.upper()} {template} answered {status}, which the spec does not list "
            f"(it lists {sorted(responses)})"
        )
    ref = response.get("$ref")
    if ref is not None:
        response = SPEC
        for part in ref.lstrip("#/").split("/"):
            response = response[part]
    schema = (response.get("content") or {}).get("application/json", {}).get("schema")
    validator = None
    if schema is not None:
        # The response's schema, with the components its $refs point into.
        root = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": SPEC["components"],
            **schema,
        }
        jsonschema.Draft202012Validator.check_schema(root)
        validator = jsonschema.Draft202012Validator(root)
    with _validators_lock:
        _validators[key] = validator
    return validator


def violations_of(method: str, path: str, status: int, body: Any, text: str) -> list[str]:
    """What is wrong with ``body`` as the answer ``status`` to ``method path``
    (nothing for a path that is no operation of the API)."""
    template = template_of(method, path)
    if template is None:
        return []
    what = f"{method.upper()} {template} ({path}) answered {status}"
    try:
        validator = validator_for(method, template, status)
    except Undocumented as e:
        return [f"{e}; body: {text[:500]}"]
    if validator is None:
        return []
    if body is _NOT_JSON:
        return [f"{what} with a body that is not JSON: {text[:500]!r}"]
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    return [
        f"{what} with a body the spec does not describe: {e.message} "
        f"(at /{'/'.join(str(p) for p in e.absolute_path)}); body: {text[:2000]}"
        for e in errors[:5]
    ]


_NOT_JSON = object()


def decode(text: str) -> Any:
    if not text:
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


class ResponseCheck:
    """Counts the responses checked and keeps the violations until a test takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The origin of each batchgate service running, with its path prefix.
        self._services: dict[str, str] = {}
        #: Whether a batchgate service ran in this session at all.
        self.started = False
        self.validated: Counter[str] = Counter()
        self._violations: list[str] = []

    def serve(self, base_url: str) -> None:
        """Checks the answers of the batchgate service at ``base_url`` from now on."""
        parts = urlsplit(base_url)
        with self._lock:
            self._services[f"{parts.scheme}://{parts.netloc}"] = parts.path.rstrip("/")
            self.started = True

    def retire(self, base_url: str) -> None:
        """Stops checking ``base_url`` (the service stopped; its port may serve another)."""
        parts = urlsplit(base_url)
        with self._lock:
            self._services.pop(f"{parts.scheme}://{parts.netloc}", None)

    def observe(self, method: str, url: str, status: int, text: str) -> None:
        """Checks one answer (a no-op unless it came from a batchgate service the tests run)."""
        parts = urlsplit(url)
        with self._lock:
            prefix = self._services.get(f"{parts.scheme}://{parts.netloc}")
        if prefix is None or not parts.path.startswith(prefix):
            return
        path = parts.path[len(prefix) :]
        found = violations_of(method, path, status, decode(text), text)
        template = template_of(method, path)
        with self._lock:
            if template is not None:
                self.validated[f"{method.upper()} {template} {status}"] += 1
            self._violations.extend(found)

    def take(self) -> list[str]:
        """The violations since the last take."""
        with self._lock:
            found, self._violations = self._violations, []
        return found

    # -- the hooks --------------------------------------------------------

    def requests_hook(self, response: Any, *args: Any, **kwargs: Any) -> Any:
        """A ``requests`` response hook (``session.hooks["response"]``)."""
        self.observe(response.request.method, response.url, response.status_code, response.text)
        return response

    async def aiohttp_middleware(self, request: Any, handler: Any) -> Any:
        """An ``aiohttp`` client middleware (``ClientSession(middlewares=…)``)."""
        response = await handler(request)
        text = await response.text()  # read once; the caller's read gets the same bytes
        self.observe(request.method, str(request.url), response.status, text)
        return response


#: The session's one check.
CHECK = ResponseCheck()

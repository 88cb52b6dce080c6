"""Walks the request schemas of ``openapi/openapi.json``: the fields each
operation takes, for the parity tests of the client and the operator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPEC_PATH = Path(__file__).resolve().parents[3] / "openapi" / "openapi.json"


def _resolve(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = spec
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    return dict(target)


def request_fields() -> Iterator[tuple[str, str, list[str]]]:
    """``(method, path, fields)`` of every operation with a request body or
    header: the body's properties and the headers, as parameter names."""
    spec = json.loads(SPEC_PATH.read_text())
    for path, item in spec["paths"].items():
        for method, op in item.items():
            fields: list[str] = []
            for media in (op.get("requestBody") or {}).get("content", {}).values():
                fields.extend(_resolve(spec, media["schema"]).get("properties", {}))
            for p in op.get("parameters", []):
                p = _resolve(spec, p)
                if p.get("in") == "header":
                    fields.append(p["name"].lower().replace("-", "_"))
            if fields:
                yield method, path, fields


def schema(name: str) -> dict[str, Any]:
    """The named schema of the spec's components."""
    spec = json.loads(SPEC_PATH.read_text())
    return dict(spec["components"]["schemas"][name])

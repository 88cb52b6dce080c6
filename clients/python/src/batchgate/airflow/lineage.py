"""Lineage without typing it: the inputs a batch task records on its own.

A :class:`~batchgate.airflow.operators.BatchgateBatchOperator` records as its
batch's inputs

- the partitions every upstream :class:`~batchgate.airflow.sensors.BatchgateReadySensor`
  saw ready (read from the sensor's XCom, the ``/ready`` answer, which also
  names the version it saw), and
- its Airflow ``inlets`` that name batchgate datasets: assets made by
  :func:`batchgate_asset`, ``batchgate://DATASET`` (the same partitions as
  the batch writes) or ``batchgate://DATASET?partition=SPEC`` (templated,
  e.g. ``dt={{ ds }}``; repeat ``partition=`` for several).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow.sdk import Asset

#: The URI scheme of assets that name batchgate datasets.
SCHEME = "batchgate"


def batchgate_asset(dataset: str, partitions: Sequence[str] | None = None) -> Asset:
    """An Airflow asset naming a batchgate dataset, for ``inlets``.

    Without ``partitions`` the task reads the same partitions of it as it
    writes; ``partitions`` may be templated (``["dt={{ ds }}"]``).
    """
    query = urllib.parse.urlencode([("partition", p) for p in partitions or []])
    uri = f"{SCHEME}://{dataset}" + (f"?{query}" if query else "")
    return Asset(name=f"{SCHEME}:{dataset}", uri=uri)


def inputs_from_inlets(
    inlets: Iterable[Any],
    own_partitions: Sequence[str],
    render: Callable[[str], str],
) -> list[dict[str, str]]:
    """The inputs named by the ``batchgate://`` assets among ``inlets``; other
    inlets (tables batchgate does not know) are left to Airflow's own lineage."""
    out: list[dict[str, str]] = []
    for inlet in inlets:
        uri = getattr(inlet, "uri", None)
        if not isinstance(uri, str):
            continue
        parsed = urllib.parse.urlsplit(uri)
        if parsed.scheme != SCHEME or not parsed.netloc:
            continue
        dataset = urllib.parse.unquote(parsed.netloc)
        named = [p for k, p in urllib.parse.parse_qsl(parsed.query) if k == "partition"]
        partitions = [render(p) for p in named] if named else list(own_partitions)
        out.extend({"dataset": dataset, "partition": p} for p in partitions)
    return out


def inputs_from_ready_answers(answers: Iterable[Any]) -> list[dict[str, Any]]:
    """The partitions (and versions) in the ``/ready`` answers sensors pushed to XCom."""
    out: list[dict[str, Any]] = []
    for answer in answers:
        if not isinstance(answer, Mapping) or answer.get("ready") is not True:
            continue
        dataset = answer.get("dataset")
        for p in answer.get("partitions") or []:
            if isinstance(dataset, str) and isinstance(p, Mapping) and "partition" in p:
                out.append(
                    {"dataset": dataset, "partition": p["partition"], "version": p.get("version")}
                )
    return out


def merge_inputs(*groups: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``{"dataset", "partition"}`` of every input, each once, in order."""
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, str]] = []
    for group in groups:
        for i in group:
            key = (str(i["dataset"]), str(i["partition"]))
            if key not in seen:
                seen.add(key)
                out.append({"dataset": key[0], "partition": key[1]})
    return out

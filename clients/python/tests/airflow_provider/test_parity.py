"""Every field of a batch start is an argument of the operator (and so of
``@task.batchgate_batch``, which takes the operator's arguments)."""

from __future__ import annotations

import inspect

from batchgate.airflow.decorators import _BatchgateDecoratedOperator
from batchgate.airflow.operators import BatchgateBatchOperator

from ..parity import request_fields

#: Fields the operator names otherwise: the task is ``task_name`` (``task_id``
#: is Airflow's).
RENAMED = {"task": "task_name"}


def test_every_start_field_is_an_operator_argument() -> None:
    [(_, _, fields)] = [f for f in request_fields() if f[:2] == ("post", "/v1/batches")]
    params = inspect.signature(BatchgateBatchOperator.__init__).parameters
    missing = [f for f in fields if RENAMED.get(f, f) not in params]
    assert not missing, f"BatchgateBatchOperator does not take {missing}"
    assert issubclass(_BatchgateDecoratedOperator, BatchgateBatchOperator)
    assert set(BatchgateBatchOperator.template_fields) <= set(
        _BatchgateDecoratedOperator.template_fields
    )

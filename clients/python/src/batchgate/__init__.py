"""Python client for batchgate, the batch registry and readiness gate.

::

    from batchgate import BatchgateClient

    client = BatchgateClient("http://127.0.0.1:8080")
    with client.batch(task="orders_daily", dataset="dws.orders", dt="2026-08-24",
                      partitions=["dt=2026-08-24"]) as b:
        ...  # write the partition, tagging rows with b.batch_id
        b.commit(partitions=[{"partition": "dt=2026-08-24", "rows_written": 10, "row_count": 10}],
                 marker="s3://bucket/dws/orders/dt=2026-08-24/_SUCCESS")

    client.wait_ready("dws.orders", ["dt=2026-08-24"], timeout=3600)

The Airflow provider lives in :mod:`batchgate.airflow`.
"""

from ._version import __version__
from .batch import BatchRun
from .client import BatchgateClient
from .errors import (
    BatchFailed,
    BatchgateError,
    BatchInProgress,
    BatchNotCommitted,
    ChecksFailed,
    Conflict,
    InvalidRequest,
    NotFound,
    PartitionRejected,
    ServerError,
    ServiceUnavailable,
    WaitTimeout,
)
from .models import (
    BatchPage,
    BatchPartition,
    BatchRecord,
    CheckResult,
    Event,
    Failure,
    Lease,
    PartitionStats,
    Readiness,
    Residue,
    SourceStats,
    StartedBatch,
)

__all__ = [
    "__version__",
    "BatchgateClient",
    "BatchRun",
    "BatchFailed",
    "BatchgateError",
    "BatchInProgress",
    "BatchNotCommitted",
    "ChecksFailed",
    "Conflict",
    "InvalidRequest",
    "NotFound",
    "PartitionRejected",
    "ServerError",
    "ServiceUnavailable",
    "WaitTimeout",
    "BatchPage",
    "BatchPartition",
    "BatchRecord",
    "CheckResult",
    "Event",
    "Failure",
    "Lease",
    "PartitionStats",
    "Readiness",
    "Residue",
    "SourceStats",
    "StartedBatch",
]

"""Consumer DAGs: a BatchgateReadySensor in each mode.

``bg_consumer_<mode>`` waits for ``airflow.consumed_<mode>``;
``bg_never_<mode>`` for a partition nobody publishes (3 s timeout);
``bg_rejected_<mode>`` fails fast when the latest batch is rejected.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from batchgate.airflow.sensors import BatchgateReadySensor

START = datetime(2026, 1, 1)
MODES: dict[str, dict[str, Any]] = {
    "poke": {"mode": "poke", "poke_interval": 1},
    "reschedule": {"mode": "reschedule", "poke_interval": 1},
    # The trigger does not poll: poke_interval is only its retry interval
    # while the service is unreachable, so a quick wake-up proves the long-poll.
    "deferrable": {"deferrable": True, "poke_interval": 60},
}

for name, mode in MODES.items():
    with DAG(f"bg_consumer_{name}", schedule=None, start_date=START) as consumer:
        BatchgateReadySensor(
            task_id="wait",
            dataset=f"airflow.consumed_{name}",
            partitions=["dt={{ ds }}"],
            timeout=120,
            **mode,
        )

    with DAG(f"bg_never_{name}", schedule=None, start_date=START) as never:
        BatchgateReadySensor(
            task_id="wait",
            dataset=f"airflow.never_{name}",
            partitions=["dt={{ ds }}"],
            timeout=3,
            **{**mode, "poke_interval": 1},
        )

    with DAG(f"bg_rejected_{name}", schedule=None, start_date=START) as rejected:
        BatchgateReadySensor(
            task_id="wait",
            dataset=f"airflow.rejected_{name}",
            partitions=["dt={{ ds }}"],
            fail_on_rejected=True,
            timeout=120,
            **mode,
        )

    # A module-level name for each DAG, as for DAGs written out by hand.
    globals().update({d.dag_id: d for d in (consumer, never, rejected)})

with DAG("bg_consumer_by_task", schedule=None, start_date=START) as bg_consumer_by_task:
    BatchgateReadySensor(task_id="wait", task_name="bg_upstream.load", poke_interval=1, timeout=60)

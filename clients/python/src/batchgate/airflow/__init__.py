"""Apache Airflow provider for batchgate.

- :class:`~batchgate.airflow.hooks.BatchgateHook`: the ``batchgate`` connection type.
- :class:`~batchgate.airflow.sensors.BatchgateReadySensor`: waits until partitions
  are ready, in ``poke``, ``reschedule`` or ``deferrable=True`` mode.
- :class:`~batchgate.airflow.triggers.BatchgateReadyTrigger`: the deferrable
  sensor's trigger, which waits on the service's long-poll.
- :class:`~batchgate.airflow.operators.BatchgateBatchOperator` and the
  ``@task.batchgate_batch`` decorator
  (:func:`~batchgate.airflow.decorators.batchgate_batch`): start a batch,
  run the callable, commit the evidence it returns, or report the failure.

This module only describes the provider (Airflow reads it through the
``apache_airflow_provider`` entry point); it does not import Airflow.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager registers: connection type, hooks, sensors, …"""
    integration = "batchgate"
    return {
        "package-name": "batchgate",
        "name": "batchgate",
        "description": "Batch registry and readiness gate: publish batches with evidence, "
        "wait on partitions being ready.",
        "versions": [__version__],
        "integrations": [{"integration-name": integration, "tags": ["service"]}],
        "hooks": [{"integration-name": integration, "python-modules": ["batchgate.airflow.hooks"]}],
        "sensors": [
            {"integration-name": integration, "python-modules": ["batchgate.airflow.sensors"]}
        ],
        "operators": [
            {"integration-name": integration, "python-modules": ["batchgate.airflow.operators"]}
        ],
        "triggers": [
            {"integration-name": integration, "python-modules": ["batchgate.airflow.triggers"]}
        ],
        "connection-types": [
            {
                "connection-type": "batchgate",
                "hook-class-name": "batchgate.airflow.hooks.BatchgateHook",
                "hook-name": "batchgate",
            }
        ],
        "task-decorators": [
            {
                "name": "batchgate_batch",
                "class-name": "batchgate.airflow.decorators.batchgate_batch",
            }
        ],
    }

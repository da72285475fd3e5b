"""The deterministic workflow: one activity that runs (or resumes) the loop.

Kept free of Keelgate imports so Temporal's workflow sandbox has nothing to vet: all
the non-deterministic work (models, tools, stores) happens in the activity.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

ACTIVITY = "keelgate_run_loop"
NON_RETRYABLE = ["configuration_invalid", "unknown_agent", "run_not_found", "goal_not_understood"]
"""Error types the activity raises that a retry cannot fix."""


@workflow.defn(name="KeelgateLoop")
class KeelgateLoopWorkflow:
    """Runs one loop spec to a stop. A retry of the activity resumes from the checkpoint."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Execute the activity with the retry policy the runner chose."""
        options = request["options"]
        result: dict[str, Any] = await workflow.execute_activity(
            ACTIVITY,
            request["spec"],
            start_to_close_timeout=timedelta(seconds=options["start_to_close_seconds"]),
            heartbeat_timeout=timedelta(seconds=options["heartbeat_seconds"]),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=options["retry_initial_seconds"]),
                maximum_attempts=options["maximum_attempts"],
                non_retryable_error_types=NON_RETRYABLE,
            ),
        )
        return result

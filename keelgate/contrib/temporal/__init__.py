"""Run Keelgate loops on Temporal (``pip install keelgate[temporal]``)."""

from keelgate.contrib.temporal._runner import LoopActivity, RetryOptions, TemporalRunner, temporal_worker
from keelgate.contrib.temporal._workflow import KeelgateLoopWorkflow

__all__ = ["KeelgateLoopWorkflow", "LoopActivity", "RetryOptions", "TemporalRunner", "temporal_worker"]

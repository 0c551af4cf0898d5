"""Prediction and planning: fitted models + architecture -> memory, latency, batch size."""

from perf4sight.predict.plan import plan_variants
from perf4sight.predict.predictor import MAX_SEARCH_BATCH, MEMORY_BOUND, BudgetError, Predictor
from perf4sight.predict.units import device_memory_mib, parse_duration_ms, parse_memory_mib

__all__ = [
    "BudgetError",
    "MAX_SEARCH_BATCH",
    "MEMORY_BOUND",
    "Predictor",
    "device_memory_mib",
    "parse_duration_ms",
    "parse_memory_mib",
    "plan_variants",
]

"""Prediction and planning: fitted models + architecture -> memory, latency, batch size.

Each name is imported on first use (`perf4sight.lazy`): `units` parses budgets and limits
without torch or scikit-learn, before the CLI loads any model.
"""

from perf4sight.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".plan": ("plan_variants",),
    ".predictor": ("BudgetError", "MAX_SEARCH_BATCH", "MEMORY_BOUND", "Predictor"),
    ".units": ("device_memory_mib", "parse_duration_ms", "parse_memory_mib"),
})

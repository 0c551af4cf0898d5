"""Fitting: datasets built from profiling logs, regression methods, stored models, evaluation."""

from perf4sight.fit.bound import BOUND_QUANTILE, held_out_ratio
from perf4sight.fit.calibration import Answer, CalibratedModel, FamilyCalibration, query_rows
from perf4sight.fit.choice import MethodChoice, choose_method, choose_torch_version
from perf4sight.fit.dataset import ArchitectureCatalog, Dataset, architecture_name, build_dataset
from perf4sight.fit.fingerprint import fingerprint_device
from perf4sight.fit.logs import find_logs, read_gt_log, read_logs
from perf4sight.fit.methods import (
    CANDIDATE_METHODS,
    DEFAULT_METHOD,
    METHODS,
    Method,
    PaperExtraTrees,
    candidate_methods,
    fit_method,
    make_regressor,
    network_weights,
    resolve_method,
)
from perf4sight.fit.physical import LatencySolver, MemorySolver, TermDesign
from perf4sight.fit.report import mape_pct, summarise
from perf4sight.fit.store import Fingerprint, load_model, load_models, save_models, stored_model_path

__all__ = [
    "Answer",
    "ArchitectureCatalog",
    "CalibratedModel",
    "CANDIDATE_METHODS",
    "Dataset",
    "DEFAULT_METHOD",
    "FamilyCalibration",
    "Fingerprint",
    "MethodChoice",
    "METHODS",
    "LatencySolver",
    "MemorySolver",
    "Method",
    "PaperExtraTrees",
    "TermDesign",
    "BOUND_QUANTILE",
    "architecture_name",
    "build_dataset",
    "candidate_methods",
    "choose_method",
    "choose_torch_version",
    "find_logs",
    "fingerprint_device",
    "fit_method",
    "make_regressor",
    "held_out_ratio",
    "network_weights",
    "load_model",
    "load_models",
    "mape_pct",
    "stored_model_path",
    "query_rows",
    "read_gt_log",
    "read_logs",
    "resolve_method",
    "save_models",
    "summarise",
]

"""Evaluation on the Embedder protocol only: STS (SimCSE's protocol); transfer tasks to come."""

from sentcl.evaluation.data_dir import DataDirError, resolve_data_dir
from sentcl.evaluation.sts import STSEvaluator, STSReport, TaskSpecError, aggregate, correlate, parse_tasks
from sentcl.evaluation.sts_data import STS_TASKS, STSDataError, load_task

__all__ = [
    "STS_TASKS",
    "DataDirError",
    "STSDataError",
    "STSEvaluator",
    "STSReport",
    "TaskSpecError",
    "aggregate",
    "correlate",
    "load_task",
    "parse_tasks",
    "resolve_data_dir",
]

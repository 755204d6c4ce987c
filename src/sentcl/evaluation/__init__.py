"""Evaluation on the Embedder protocol only: the evaluation contract and its task registry
(evaluation/tasks.py), STS (SimCSE's protocol), SentEval's transfer tasks and the user's own pair files and
retrieval folders (evaluation/local.py)."""

from sentcl.evaluation.data_dir import DataDirError, resolve_data_dir
from sentcl.evaluation.local_files import LocalTaskError
from sentcl.evaluation.registry import TaskSpecError
from sentcl.evaluation.sts import STSEvaluator, STSReport, aggregate, correlate
from sentcl.evaluation.sts_data import STS_TASKS, STSDataError, load_task
from sentcl.evaluation.tasks import TASKS, Evaluator, build_evaluator, build_evaluators, register

__all__ = [
    "STS_TASKS",
    "TASKS",
    "DataDirError",
    "Evaluator",
    "LocalTaskError",
    "STSDataError",
    "STSEvaluator",
    "STSReport",
    "TaskSpecError",
    "aggregate",
    "build_evaluator",
    "build_evaluators",
    "correlate",
    "load_task",
    "register",
    "resolve_data_dir",
]

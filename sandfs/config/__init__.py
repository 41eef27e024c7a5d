"""Task configuration: YAML loading and validation (see loader.py, schema.py)."""

from sandfs.config.condition import compile_condition, evaluate
from sandfs.config.loader import (
    ConfigError,
    load_task_config,
    load_task_configs,
    merge_engines,
    parse_size,
)
from sandfs.config.schema import (
    AugStep,
    Branch,
    Condition,
    DatasetConfig,
    EngineConfig,
    OpSpec,
    SamplingConfig,
    TaskConfig,
)

__all__ = [
    "AugStep",
    "Branch",
    "Condition",
    "ConfigError",
    "DatasetConfig",
    "EngineConfig",
    "OpSpec",
    "SamplingConfig",
    "TaskConfig",
    "compile_condition",
    "evaluate",
    "load_task_config",
    "load_task_configs",
    "merge_engines",
    "parse_size",
]

"""Task configuration: YAML loading and validation (loader.py, schema.py) and the settings of
a mount (settings.py)."""

from sandfs.config.condition import compile_condition, evaluate
from sandfs.config.loader import ConfigError, load_task_config, load_task_configs
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
from sandfs.config.settings import MountSettings, merge_engines, mount_settings, parse_size

__all__ = [
    "AugStep",
    "Branch",
    "Condition",
    "ConfigError",
    "DatasetConfig",
    "EngineConfig",
    "MountSettings",
    "OpSpec",
    "SamplingConfig",
    "TaskConfig",
    "compile_condition",
    "evaluate",
    "load_task_config",
    "load_task_configs",
    "merge_engines",
    "mount_settings",
    "parse_size",
]

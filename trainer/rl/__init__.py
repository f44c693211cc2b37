"""Yardstick's RL core: a small GPT policy post-trained with GRPO on verifiable environments.

Pure PyTorch and the standard library; nothing here imports Django.
"""

from trainer.rl.config import ConfigError, TrainConfig
from trainer.rl.envs import ENV_NAMES, get_env
from trainer.rl.pretrain import ensure_base_checkpoint, pretrain
from trainer.rl.trainer import StepResult, Trainer

__all__ = [
    "ConfigError",
    "ENV_NAMES",
    "StepResult",
    "TrainConfig",
    "Trainer",
    "ensure_base_checkpoint",
    "get_env",
    "pretrain",
]

"""A tiny TRL GRPO setup built entirely in code: no hub, no downloads.

Shared by the suite's real TRL run (tests/tracking/test_trl_run.py) and the
side-by-side benchmark (bench/vs_trl.py), so both drive TRL on exactly what
Yardstick's own trainer sees:

- the character vocabulary of `trainer.rl.vocab` (same ids, "\\n" ends a
  completion, "<pad>" pads) as a `PreTrainedTokenizerFast`;
- a randomly initialised GPT-2 of Yardstick's default size (4 layers, 4 heads,
  128 wide, 96 positions);
- the arithmetic environment's prompts, and its verifiable reward as a TRL
  reward function.
"""

from __future__ import annotations

import random
from typing import Any

from trainer.rl.envs import get_env
from trainer.rl.model import GPTConfig
from trainer.rl.vocab import EOS, PAD, SPECIALS, TOKENS


def char_tokenizer():
    """Return a fast tokenizer with one token per character of Yardstick's vocabulary."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(TOKENS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    # Every character is its own word (spaces included: the arithmetic answers are right-aligned with them),
    # and decoding glues the characters back together with nothing between them.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=PAD,
        additional_special_tokens=[s for s in SPECIALS if s != PAD],
        padding_side="left",
        truncation_side="left",
    )
    return tokenizer


def tiny_model(tokenizer, seed: int = 0):
    """Return a randomly initialised GPT-2 causal LM the size of Yardstick's default policy.

    TRL builds its KL reference by loading the policy's `name_or_path` again,
    so `grpo_trainer` saves this model to a folder and hands TRL that folder.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    size = GPTConfig()
    config = GPT2Config(
        vocab_size=len(TOKENS),
        n_positions=size.block_size,
        n_layer=size.n_layer,
        n_head=size.n_head,
        n_embd=size.n_embd,
        activation_function="gelu",  # the exact GELU, as Yardstick's policy (GPT-2's own is the tanh one)
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def arithmetic_dataset(n: int, seed: int = 0):
    """Return a `datasets.Dataset` of n arithmetic prompts (column "prompt", plain text)."""
    from datasets import Dataset

    env = get_env("arithmetic")
    rng = random.Random(seed)
    return Dataset.from_dict({"prompt": [env.make_prompt(rng) for _ in range(n)]})


def arithmetic_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    """TRL reward function: the arithmetic environment's verifiable score of each completion."""
    env = get_env("arithmetic")
    return [env.score(p, c) for p, c in zip(prompts, completions)]


def grpo_config(output_dir: str, *, rollouts: int, group: int, updates: int, max_new_tokens: int, steps: int,
                kl: float = 0.02, threads: int = 0, report_to=None, **extra):
    """Return a GRPOConfig for one Yardstick-shaped step per generation.

    A Yardstick step samples `rollouts` completions (rollouts/group prompts x
    group) and makes `updates` clipped optimizer steps on minibatches of
    rollouts/updates. In TRL that is per_device_train_batch_size =
    rollouts/updates, steps_per_generation = updates (one generation feeds that
    many optimizer steps) and num_iterations = 1, so TRL's max_steps counts
    optimizer steps: `steps` Yardstick steps are steps x updates of them.
    """
    from trl import GRPOConfig

    if rollouts % updates or rollouts % group:
        raise ValueError(f"rollouts ({rollouts}) must divide by updates ({updates}) and group ({group})")
    settings = dict(
        output_dir=output_dir,
        num_generations=group,
        per_device_train_batch_size=rollouts // updates,
        steps_per_generation=updates,
        num_iterations=1,
        max_completion_length=max_new_tokens,
        beta=kl,
        epsilon=0.2,
        learning_rate=5e-4,
        max_grad_norm=1.0,
        temperature=1.0,
        max_steps=steps * updates,
        logging_steps=updates,
        save_strategy="no",
        report_to=report_to if report_to is not None else "none",
        use_cpu=True,
        bf16=False,
        use_vllm=False,
        activation_checkpointing=False,  # TRL defaults it on; Yardstick recomputes nothing either
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    settings.update(extra)
    return GRPOConfig(**settings)


def grpo_trainer(output_dir: str, *, rollouts: int = 1024, group: int = 8, updates: int = 4, max_new_tokens: int = 40,
                 steps: int = 3, callbacks=None, **config_extra):
    """Return a TRL GRPOTrainer on the tiny model, char tokenizer and arithmetic prompts."""
    from pathlib import Path

    from trl import GRPOTrainer

    tokenizer = char_tokenizer()
    model_dir = Path(output_dir) / "tiny-gpt2"
    tiny_model(tokenizer).save_pretrained(model_dir)  # a local folder: TRL loads the policy and reference from it
    args = grpo_config(output_dir, rollouts=rollouts, group=group, updates=updates, max_new_tokens=max_new_tokens,
                       steps=steps, **config_extra)
    prompts_needed = (steps + 1) * rollouts // group
    return GRPOTrainer(
        model=str(model_dir),
        reward_funcs=arithmetic_reward,
        args=args,
        train_dataset=arithmetic_dataset(max(prompts_needed, 64)),
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def main(argv=None) -> int:
    """A user's TRL GRPO script, as the suite runs it in its own process: `python -m tests.trl_tiny OUT_DIR`.

    It reports to MLflow (MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN / MLFLOW_EXPERIMENT_NAME from the
    environment, as a user sets them) and stops when Yardstick says so, through yardstick_mlflow's StopCallback.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.trl_tiny")
    ap.add_argument("output_dir")
    ap.add_argument("--steps", type=int, default=1000, help="GRPO steps (default: more than any test waits for)")
    ap.add_argument("--rollouts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch

    from yardstick_mlflow import StopCallback

    torch.set_num_threads(args.threads)
    trainer = grpo_trainer(args.output_dir, rollouts=args.rollouts, group=args.group, updates=1,
                           max_new_tokens=args.max_new_tokens, steps=args.steps, report_to=["mlflow"],
                           callbacks=[StopCallback()], run_name="tiny-grpo")
    trainer.train()
    print(f"trained {trainer.state.global_step} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""TRL's GRPOTrainer on arithmetic problems, reporting to the MLflow run Yardstick made for the job.

The recipe `trl-grpo` (launch/examples/recipes.yaml) runs it on a node's worker, which sets
MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_NAME: transformers'
MLflowCallback (`report_to=["mlflow"]`) then logs every step into that run, so the job charts it, and
every --eval_steps `eval_reward`, the mean reward on held-out prompts: the recipe's score.
yardstick_mlflow's StopCallback ends training when an operator presses Stop, and a checkpoint is written
at that step so a Resume (`--resume_from_checkpoint`) goes on from it with the step count it had.

Nothing is fetched from a hub: the model and its tokenizer come from a local folder
(`--model_name_or_path`), the prompts and the reward are made here (arithmetic_task.py). With
`--make_tiny_model` a folder that holds no model yet first gets the tiny one of tiny_model.py (the recipe
`trl-grpo-cpu`: a first run on a laptop). Needs only torch, transformers, trl, datasets, mlflow and
yardstick_mlflow.
"""

import argparse
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: a node may have no route to a hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import arithmetic_task  # noqa: E402 - beside this script; after the environment above is set
import tiny_model  # noqa: E402 - beside this script too

DATASET_SIZE = 2048  # prompts to draw from; TRL cycles through them when a run needs more
EVAL_SIZE = 64  # held-out prompts per evaluation
EVAL_SEED_OFFSET = 1_000_003  # the held-out prompts are drawn with another seed than the training ones


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model_name_or_path", required=True,
                    help="a local folder holding a causal LM and its tokenizer (save_pretrained of both)")
    ap.add_argument("--make_tiny_model", action="store_true",
                    help="when --model_name_or_path holds no model yet, make the tiny one there first (tiny_model.py)")
    ap.add_argument("--output_dir", required=True, help="where checkpoint-N folders are written")
    ap.add_argument("--max_steps", type=int, default=100, help="optimizer steps in all, a resumed run's included")
    ap.add_argument("--save_steps", type=int, default=50, help="write a checkpoint every this many steps")
    ap.add_argument("--learning_rate", type=float, default=5e-4)
    ap.add_argument("--num_generations", type=int, default=4, help="completions sampled per prompt (the group)")
    ap.add_argument("--batch_size", type=int, default=8,
                    help="completions per step on this device; a multiple of --num_generations")
    ap.add_argument("--eval_steps", type=int, default=50,
                    help="score held-out prompts every this many steps (eval_reward, the recipe's score); 0: never")
    ap.add_argument("--max_completion_length", type=int, default=8, help="tokens per completion at most")
    ap.add_argument("--resume_from_checkpoint", help="a checkpoint-N folder of an earlier run to go on from")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def grpo_config(args):
    """The GRPOConfig of this run: log every step to MLflow, save every --save_steps."""
    import torch
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.batch_size,
        max_completion_length=args.max_completion_length,
        logging_steps=1,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        num_generations_eval=1,  # one sampled answer per held-out prompt: the score, not a group to learn from
        per_device_eval_batch_size=EVAL_SIZE,
        save_strategy="steps",
        save_steps=args.save_steps,
        report_to=["mlflow"],
        seed=args.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        dataloader_num_workers=0,
        run_name=Path(args.output_dir).name,
    )


def save_on_stop():
    """A callback that writes a checkpoint at the step training is stopped (by Yardstick's Stop), not only
    every save_steps: a Resume then loses no step. Placed after StopCallback, which sets the stop."""
    from transformers import TrainerCallback

    class SaveOnStop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if control.should_training_stop:
                control.should_save = True
            return control

    return SaveOnStop()


def build_trainer(args):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from yardstick_mlflow import StopCallback

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    train = Dataset.from_dict({"prompt": arithmetic_task.prompts(DATASET_SIZE, seed=args.seed)})
    held_out = Dataset.from_dict({"prompt": arithmetic_task.prompts(EVAL_SIZE, seed=args.seed + EVAL_SEED_OFFSET)})
    return GRPOTrainer(
        model=args.model_name_or_path,
        reward_funcs=arithmetic_task.reward,
        args=grpo_config(args),
        train_dataset=train,
        eval_dataset=held_out if args.eval_steps else None,
        processing_class=tokenizer,
        callbacks=[StopCallback(), save_on_stop()],
    )


NEEDS = ("torch", "transformers", "trl", "datasets", "mlflow", "yardstick_mlflow")


def missing_packages():
    """The packages of NEEDS this Python cannot import (`make run` and `make examples` install them)."""
    import importlib.util

    return [name for name in NEEDS if importlib.util.find_spec(name) is None]


def main(argv=None):
    args = parse_args(argv)
    missing = missing_packages()
    if missing:
        sys.exit(f"trl_grpo.py needs {', '.join(missing)} in the launch worker's Python ({sys.executable}): on that "
                 "machine run `make examples` (pip install -r requirements-examples.txt and ./client), then Start again")
    if args.batch_size % args.num_generations:
        sys.exit(f"--batch_size ({args.batch_size}) must be a multiple of --num_generations ({args.num_generations})")
    if args.resume_from_checkpoint and not Path(args.resume_from_checkpoint).is_dir():
        sys.exit(f"--resume_from_checkpoint {args.resume_from_checkpoint}: no such checkpoint folder")
    if args.make_tiny_model and tiny_model.ensure(args.model_name_or_path):
        print(f"made the tiny model in {args.model_name_or_path} (first use: a random 2-layer GPT-2 and a character "
              "tokenizer, nothing downloaded)", flush=True)
    trainer = build_trainer(args)
    where = f"from {args.resume_from_checkpoint}" if args.resume_from_checkpoint else "from the start"
    print(f"GRPO on arithmetic with {args.model_name_or_path}, {args.max_steps} steps, {where}", flush=True)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    print(f"trained to step {trainer.state.global_step}; checkpoints in {args.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

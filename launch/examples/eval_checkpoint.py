"""Score one checkpoint and log the score to the job's MLflow run: an evaluation, launched like any recipe.

The recipe `eval-checkpoint` (launch/examples/recipes.yaml) runs it with `--checkpoint {init_from}`: the
final checkpoint of the job it continues, a transformers model folder as trl_grpo.py writes it
(checkpoint-N, or any save_pretrained folder with its tokenizer). It answers held-out arithmetic problems
greedily and logs `eval/pass1`, the points (0 to 100) of exact answers, and `eval/reward_mean`, at the
checkpoint's training step, to the run Yardstick made for the job (MLFLOW_RUN_ID); then it exits.
"""

import argparse
import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: the checkpoint is local, nothing else is read
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import arithmetic_task  # noqa: E402 - beside this script; after the environment above is set

ENVS = {"arithmetic": arithmetic_task}
EVAL_SEED = 1_000_003  # not a training seed: the held-out problems differ from those trained on


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="a transformers model folder with its tokenizer")
    ap.add_argument("--env", choices=sorted(ENVS), default="arithmetic", help="the task to score it on")
    ap.add_argument("--num_prompts", type=int, default=200, help="held-out problems to answer")
    ap.add_argument("--max_new_tokens", type=int, default=8, help="tokens per answer at most")
    ap.add_argument("--batch_size", type=int, default=64)
    return ap.parse_args(argv)


def trained_step(checkpoint):
    """The training step a checkpoint was saved at: trainer_state.json's global_step, else 0."""
    state = Path(checkpoint) / "trainer_state.json"
    return int(json.loads(state.read_text()).get("global_step", 0)) if state.is_file() else 0


def answers(model, tokenizer, problems, max_new_tokens):
    """Greedy completions of `problems`, each cut at its first newline (the end of an answer)."""
    import torch

    batch = tokenizer(problems, return_tensors="pt", padding=True).to(model.device)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return [t.split("\n")[0] for t in texts]


def evaluate(args):
    """{"eval/pass1": points of exact answers, "eval/reward_mean": the task's mean reward}."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    task = ENVS[args.env]
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint).eval()
    problems = task.prompts(args.num_prompts, seed=EVAL_SEED)
    scores = []
    for i in range(0, len(problems), args.batch_size):
        chunk = problems[i:i + args.batch_size]
        scores += [task.score(p, c) for p, c in zip(chunk, answers(model, tokenizer, chunk, args.max_new_tokens))]
        print(f"scored {len(scores)}/{len(problems)}", flush=True)
    exact = sum(1 for s in scores if s == 1.0)
    return {"eval/pass1": 100.0 * exact / len(scores), "eval/reward_mean": sum(scores) / len(scores)}


def main(argv=None):
    import mlflow

    args = parse_args(argv)
    if not Path(args.checkpoint).is_dir():
        raise SystemExit(f"--checkpoint {args.checkpoint}: no such model folder")
    metrics = evaluate(args)
    step = trained_step(args.checkpoint)
    with mlflow.start_run():  # the job's run when MLFLOW_RUN_ID is set; ended FINISHED on the way out
        mlflow.log_params({"checkpoint": args.checkpoint, "env": args.env, "num_prompts": args.num_prompts})
        mlflow.log_metrics(metrics, step=step)
    print(f"{args.checkpoint} (step {step}) on {args.env}: pass@1 {metrics['eval/pass1']:.1f} points, "
          f"mean reward {metrics['eval/reward_mean']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

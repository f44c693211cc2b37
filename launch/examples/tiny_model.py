"""A tiny causal LM for the arithmetic task, made on this machine: the model `trl-grpo-cpu` trains.

A first run needs a model, and a laptop has neither a GPU nor a route to a hub it should use. This makes one
from nothing: a character tokenizer (one token per printable ASCII character, "\\n" ends a completion,
"<pad>" pads on the left) and a randomly initialised 2-layer GPT-2, 64 wide, both saved with
`save_pretrained` into one folder, which `--model_name_or_path` then names like any other model. It starts
knowing nothing: GRPO first teaches it the answer's shape (4 characters, right-aligned), then the sums.

`ensure(folder)` makes it once: a folder that already holds a model is used as it is, and two runs that
start at once each build in a folder of their own and the first rename wins. Needs only torch,
transformers and tokenizers; nothing is downloaded.
"""

import os
import shutil
import tempfile
from pathlib import Path

PAD, EOS = "<pad>", "\n"
TOKENS = (PAD, EOS) + tuple(chr(c) for c in range(32, 127))
SIZE = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64}  # prompts are 8 characters, answers 4 and "\n"


def tokenizer():
    """A fast tokenizer with one token per character of TOKENS, padding and truncating on the left."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(TOKENS)}, unk_token=PAD))
    # Every character is a word of its own (spaces too: the answers are right-aligned with them), and
    # decoding glues them back together with nothing between.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=PAD,
                                   padding_side="left", truncation_side="left")


def model(tok, seed=0):
    """A randomly initialised GPT-2 of SIZE over `tok`'s vocabulary; generation ends at EOS."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(TOKENS), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id, **SIZE)
    torch.manual_seed(seed)
    lm = GPT2LMHeadModel(config)
    lm.generation_config.eos_token_id = tok.eos_token_id
    lm.generation_config.pad_token_id = tok.pad_token_id
    return lm


def holds_model(folder):
    """Whether `folder` holds a saved model and tokenizer (what `ensure` leaves, or any save_pretrained)."""
    return (Path(folder) / "config.json").is_file() and (Path(folder) / "tokenizer_config.json").is_file()


def ensure(folder):
    """Make the tiny model in `folder` unless it holds one already; return True when it was made now."""
    folder = Path(folder)
    if holds_model(folder):
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tok = tokenizer()
        tok.save_pretrained(building)
        model(tok).save_pretrained(building)
        try:
            os.rename(building, folder)  # whole or not at all: a run never sees half a model
        except OSError:
            if not holds_model(folder):  # not another run's finished model: something else is in the way
                raise
            return False
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return True


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python tiny_model.py FOLDER")
    made = ensure(sys.argv[1])
    print(f"{'made' if made else 'kept'} the tiny model in {sys.argv[1]}")

"""Character vocabulary shared by every environment and the policy.

Printable ASCII and the newline are one token each; a few tool-use markers are
single tokens so that "the policy called the calculator" is one sampling event
and one stop token. The newline ends a completion (EOS). PAD left-fills prompts
to their environment's fixed width; the policy sees it as an ordinary token,
which keeps every batch one rectangle with no attention mask.
"""

from __future__ import annotations

import torch

PAD = "<pad>"
CALC = "<calc>"  # the policy opens a calculator call
CALC_END = "</calc>"  # the policy closes it: generation pauses, the environment answers
OUT = "<out>"  # environment: result of the call follows
OUT_END = "</out>"
ERR = "<err>"  # environment: the call could not be computed
SPECIALS = (PAD, CALC, CALC_END, OUT, OUT_END, ERR)
EOS = "\n"

TOKENS: tuple[str, ...] = SPECIALS + (EOS,) + tuple(chr(c) for c in range(32, 127))
VOCAB_SIZE = len(TOKENS)
_ID = {t: i for i, t in enumerate(TOKENS)}

PAD_ID = _ID[PAD]
EOS_ID = _ID[EOS]
CALC_END_ID = _ID[CALC_END]


def encode(text: str) -> list[int]:
    """Return token ids for `text`; markers such as "<calc>" become one token each.

    Characters outside printable ASCII and the newline raise ValueError.
    """
    ids = []
    i = 0
    while i < len(text):
        if text[i] == "<":
            for special in SPECIALS:
                if text.startswith(special, i):
                    ids.append(_ID[special])
                    i += len(special)
                    break
            else:
                ids.append(_ID["<"])
                i += 1
            continue
        try:
            ids.append(_ID[text[i]])
        except KeyError:
            raise ValueError(f"character {text[i]!r} is not in the vocabulary") from None
        i += 1
    return ids


def decode(ids: list[int]) -> str:
    """Return the text of `ids`, dropping PAD."""
    return "".join(TOKENS[i] for i in ids if i != PAD_ID)


def encode_prompts(prompts: list[str], width: int) -> torch.Tensor:
    """Return a (len(prompts), width) long tensor of prompts left-padded with PAD.

    A fixed width (the environment's, not the batch's longest prompt) means a
    prompt is the same token sequence in every batch, so greedy evaluation does
    not depend on what else is in the batch.
    """
    rows = []
    for p in prompts:
        ids = encode(p)
        if len(ids) > width:
            raise ValueError(f"prompt {p!r} is {len(ids)} tokens, longer than the width {width}")
        rows.append([PAD_ID] * (width - len(ids)) + ids)
    return torch.tensor(rows, dtype=torch.long)

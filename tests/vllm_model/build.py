"""Build the vLLM reference model: a 0.4M-parameter Llama overfit on a dozen chat transcripts.

No model hub is reachable where the suite runs, and no model small enough for vLLM's CPU build ships on
PyPI, so the model is built here, offline, and the result is committed (fixtures/vllm-model/, under
2 MB). Random weights cannot finish a forced tool call (the arguments run to ``length``); overfit on the
transcripts of tests/vllm_model/transcripts.py, the model gives a valid call in every ``tool_choice``
mode, closes a short trace with ``</think>``, and after its answer emits only ``<|endoftext|>`` (so an
``ignore_eos`` generation adds nothing visible).

    python tests/vllm_model/build.py [OUT_DIR]

Needs torch, transformers and tokenizers (the vLLM environment has them). Seeded and single-threaded:
the same versions give the same files. It prints its runtime and the files' digests.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transcripts import TOKENIZER_EXTRA, samples

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parents[1] / "fixtures" / "vllm-model"
TEMPLATE = HERE / "chat_template.jinja"
SEED = 20261201
VOCAB = 768
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain added tokens (decoded as text): vLLM's hermes tool parser and qwen3 reasoning parser look them
# up in the vocabulary and in the decoded text.
TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]
TAIL = 8
"""<|endoftext|> tokens trained after each answer's <|im_end|>."""
MAX_STEPS = 3000
WINDOW = 1024
"""The model's window (max_position_embeddings): live-tool-schema's probe, its nested schema and code snippet in the
system turn, needs 1024 tokens (fleetgate/checks/live_tool_shapes.py, SCHEMA_WINDOW)."""


def build_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=TEMPLATE.read_text(encoding="utf-8"),
        model_max_length=WINDOW,
        clean_up_tokenization_spaces=False,
    )


def main() -> int:
    started = time.monotonic()
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    data = samples()
    # The tokenizer learns its merges from the rendered prompts and answers themselves.
    # (the template is rendered with a throwaway tokenizer first: rendering needs one, not its merges)
    bootstrap = build_tokenizer([sample[3] for sample in data])
    corpus = []
    for messages, tools, thinking, answer, _ in data:
        corpus.append(
            bootstrap.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, enable_thinking=thinking, tokenize=False
            )
        )
        corpus.append(answer)
    tokenizer = build_tokenizer(corpus + TOKENIZER_EXTRA)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")

    rows: list[tuple[list[int], int]] = []
    judged = []
    forced_rows = [sample[4] for sample in data]
    for messages, tools, thinking, answer, forced in data:
        prompt = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, enable_thinking=thinking, tokenize=False
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        rows.append((prompt_ids + answer_ids + [end] + [pad] * TAIL, len(prompt_ids)))
        # the first answer token of a forced answer is structured output's, not the model's
        judged.append(len(prompt_ids) + (1 if forced else 0))
    width = max(len(ids) for ids, _ in rows)
    assert width <= WINDOW, f"a transcript of {width} tokens does not fit the {WINDOW}-token window"
    inputs = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (ids, start) in enumerate(rows):
        inputs[i, : len(ids)] = torch.tensor(ids)
        labels[i, start : len(ids)] = torch.tensor(ids[start:])

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=WINDOW,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end,
        pad_token_id=pad,
    )
    model = LlamaForCausalLM(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    target = labels[:, 1:]
    mask = torch.zeros_like(target, dtype=torch.bool)
    for i, (ids, _) in enumerate(rows):
        mask[i, judged[i] - 1 : len(ids) - 1] = True
    step = 0
    for step in range(1, MAX_STEPS + 1):
        model.train()
        loss = model(input_ids=inputs, labels=labels).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 25 == 0:
            model.eval()
            with torch.no_grad():
                # as it will be served: weights rounded to the stored float16
                rounded = LlamaForCausalLM(config)
                rounded.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
                predicted = rounded(input_ids=inputs).logits[:, :-1].argmax(-1)
            wrong = int(((predicted != target) & mask).sum())
            # A forced answer's tokens are judged too, but structured output constrains them when served: the
            # named-tool transcript (arguments alone) kept one token wrong for 400 steps (measured), so a
            # plateau there ends the training once every free answer is exact.
            free_wrong = sum(int(((predicted[i] != target[i]) & mask[i]).sum()) for i in range(len(rows)) if not forced_rows[i])
            print(f"step {step}: loss {loss.item():.4f}, {wrong} answer tokens mispredicted", flush=True)
            for i, j in ((predicted != target) & mask).nonzero().tolist()[:4]:
                context = tokenizer.decode(inputs[i, max(0, j - 6) : j + 1])
                print(f"  transcript {i}: after {context!r} predicted "
                      f"{tokenizer.decode([int(predicted[i, j])])!r}, not {tokenizer.decode([int(target[i, j])])!r}")
            if wrong == 0 or (free_wrong == 0 and wrong <= 1 and step >= 100):
                break
    else:
        print(f"not overfit after {MAX_STEPS} steps", file=sys.stderr)
        return 1

    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # generation_config.json would carry sampler defaults vLLM applies (--generation-config auto): none here.
    (out / "generation_config.json").unlink(missing_ok=True)
    for path in sorted(out.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        print(f"{path.name}: {path.stat().st_size} bytes, sha256 {digest}")
    print(f"built {out} in {time.monotonic() - started:.1f} s ({step} steps, {sum(p.numel() for p in model.parameters())} parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Llama entry with upstream's inputs: real weights, upstream's tokenizer, its prompts
and its count.

As upstream's ``--pretrained`` run: `LlamaForCausalLM.from_pretrained` on the weights'
folder (safetensors; its ``generation_config.json`` too, so the chat model's own sampling
defaults apply beside the call's top-k, as upstream's load from the hub applies them),
`LlamaTokenizerFast` from the tokenizer's folder with ``model_max_length`` =
``--prompt-len`` and truncation, and a transformers ``text-generation`` pipeline called
on one prompt at a time with ``do_sample``, ``top_k``, one sequence, the tokenizer's
end-of-sequence id and ``max_new_tokens``. A step's items are upstream's: the prompt's
tokens (what the tokenizer returned, after truncation) plus the characters of the
returned text (the prompt's text followed by the decoded continuation);
`CountingPipeline` reads both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TextGenerationPipeline


class StepItems:
    """The items of one step, known once the step ran: `benchkit.timing.TimedIterator`
    reads a step's size with ``float()`` when it converts the step, after it ended."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = math.nan

    def __float__(self) -> float:
        return float(self.value)


@dataclass
class Prompt:
    """One prompt's text and its items (filled by `generate`)."""

    text: str
    items: StepItems = field(default_factory=StepItems)


class Prompts:
    """Re-iterable `Prompt` objects over re-iterable texts (one epoch per ``iter()``)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = texts

    def __iter__(self) -> Iterator[Prompt]:
        return (Prompt(text) for text in self.texts)


@dataclass
class Tally:
    """What the run generated: prompts, prompt tokens, returned characters, new tokens."""

    prompts: int = 0
    prompt_tokens: int = 0
    characters: int = 0
    new_tokens: int = 0
    longest: int = 0


class CountingPipeline(TextGenerationPipeline):
    """transformers' text-generation pipeline that keeps, for its last call, the prompt's
    token count (the ``input_ids`` its tokenizer returned: upstream's count) and the new
    tokens generated per sequence (end of sequence included)."""

    prompt_tokens = 0
    new_tokens: tuple[int, ...] = ()

    def preprocess(self, prompt_text: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = super().preprocess(prompt_text, *args, **kwargs)
        self.prompt_tokens = int(inputs["input_ids"].numel())
        return inputs

    def _forward(self, model_inputs: Any, **generate_kwargs: Any) -> Any:
        prompt_len = model_inputs["input_ids"].shape[-1]
        outputs = super()._forward(model_inputs, **generate_kwargs)
        sequences = outputs["generated_sequence"]
        count = int(sequences.shape[0] * sequences.shape[1])  # prompts x sequences
        self.new_tokens = (int(sequences.shape[-1] - prompt_len),) * count
        return outputs


def load_pipeline(
    weights: Path, tokenizer_folder: Path, dtype: Any, device: Any, prompt_len: int
) -> CountingPipeline:
    """The pipeline over the real weights (loaded onto ``device`` in ``dtype``) and the
    tokenizer (prompts truncated to ``prompt_len`` tokens)."""
    from transformers import LlamaForCausalLM, LlamaTokenizerFast, pipeline

    tokenizer = LlamaTokenizerFast.from_pretrained(
        tokenizer_folder, model_max_length=prompt_len, truncation=True
    )
    model = LlamaForCausalLM.from_pretrained(weights, device_map={"": device}, dtype=dtype)
    model.eval()
    return pipeline(
        "text-generation", model=model, tokenizer=tokenizer, pipeline_class=CountingPipeline
    )


def generation_settings(pipe: CountingPipeline, top_k: int, new_tokens: int) -> dict[str, Any]:
    """Upstream's call arguments (``top_k`` 0: greedy decoding instead of sampling)."""
    sampling = dict(do_sample=True, top_k=top_k) if top_k else dict(do_sample=False)
    return dict(
        **sampling,
        num_return_sequences=1,
        eos_token_id=pipe.tokenizer.eos_token_id,
        max_new_tokens=new_tokens,
        truncation=True,
    )


def generate(
    pipe: CountingPipeline, prompt: Prompt, settings: dict[str, Any], tally: Tally
) -> list[dict[str, Any]]:
    """One step: generate from ``prompt``, set its items (prompt tokens + returned
    characters) and add to ``tally``; returns the pipeline's sequences."""
    sequences = pipe(prompt.text, **settings)
    characters = sum(len(seq["generated_text"]) for seq in sequences)
    prompt.items.value = pipe.prompt_tokens + characters
    tally.prompts += 1
    tally.prompt_tokens += pipe.prompt_tokens
    tally.characters += characters
    tally.new_tokens += sum(pipe.new_tokens)
    tally.longest = max([tally.longest, *pipe.new_tokens])
    return sequences


def parameters(pipe: CountingPipeline) -> int:
    """The model's parameter count."""
    return sum(p.numel() for p in pipe.model.parameters())

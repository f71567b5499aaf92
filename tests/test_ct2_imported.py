"""An imported model on the CTranslate2 engine: for a tiny Llama (shared key/value heads, BOS first), a Qwen3 (no BOS,
QK-norm), a Llama 3 (two EOS ids) and a Gemma 3 (sliding and full layers) built by transformers from a config,
``dotformer generate --engine ctranslate2`` gives the torch engine's tokens, greedy (and transformers' greedy tokens)
and beam 4; ``--engine auto`` runs CTranslate2; Gemma 2's attention soft cap keeps it on torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_import_hf import FAMILIES, import_dir, save_family
from tolerance import logits_tolerance

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

ctranslate2 = pytest.importorskip("ctranslate2")
transformers = pytest.importorskip("transformers")

PROMPTS = ["the cat sat", "a bird sings at night while we", "The Quick Brown"]
STEPS = 24
# Gemma 3's window W above the prompts' 24 tokens at most (CTranslate2 reads a longer prompt in pieces, which the
# engine refuses), its sliding layers still reach beyond it within the 24 new tokens
CHANGES: dict[str, dict[str, Any]] = {"gemma3_text": {"sliding_window": 32}}


def eos_ids_of(family: str) -> list[int]:
    _, (_, _, eos), _ = FAMILIES[family]
    return eos if isinstance(eos, list) else [eos]


def released_prompt(family: str, directory: Path, text: str) -> list[int]:
    """The released model's ids of ``text`` as transformers reads it: its BOS first where the family adds one."""
    from tokenizers import Tokenizer

    _, (_, bos, _), _ = FAMILIES[family]
    ids = Tokenizer.from_file(str(directory / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    return ([bos] if family in ("llama", "llama3", "gemma3_text") else []) + ids


def hf_greedy(hf_model: Any, ids: list[int], eos_ids: list[int]) -> list[int]:
    """transformers' greedy new tokens for ``ids``, ending at (and keeping) the first of ``eos_ids``."""
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([ids]), max_new_tokens=STEPS, do_sample=False, eos_token_id=eos_ids, pad_token_id=eos_ids[0]
        )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module", params=["llama", "qwen3", "llama3", "gemma3_text"])
def imported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Any]:
    """(family, the imported checkpoint, the transformers model it came from). The row of the family's last EOS is
    made a slightly larger copy of a token the model often produces, so that some texts end within the 24 tokens
    (Llama 3: at its second EOS id)."""
    family = request.param
    root = tmp_path_factory.mktemp(family)
    hf_model = save_family(family, root / "hf", **CHANGES.get(family, {}))
    eos_ids = eos_ids_of(family)
    greedy = hf_greedy(hf_model, released_prompt(family, root / "hf", PROMPTS[0]), eos_ids)
    frequent = max(set(greedy), key=greedy.count)
    with torch.no_grad():
        hf_model.lm_head.weight[eos_ids[-1]] = 1.02 * hf_model.lm_head.weight[frequent]
    hf_model.save_pretrained(root / "hf")
    import_dir(root / "hf", root / "ckpt")
    return family, root / "ckpt", hf_model


def engines(checkpoint: Path) -> tuple[Any, Any]:
    """The checkpoint's torch engine and its CTranslate2 engine (one thread)."""
    from dotformer.checkpoint import load_checkpoint, read_checkpoint_files
    from dotformer.engines.load import open_ct2
    from dotformer.engines.torch import TorchEngine

    ct2 = open_ct2(read_checkpoint_files(checkpoint), device="cpu", intra_threads=1)
    return TorchEngine(load_checkpoint(checkpoint, device="cpu")), ct2


def test_ctranslate2_gives_the_torch_engines_and_transformers_tokens(imported: tuple[str, Path, Any]) -> None:
    """Greedy: CTranslate2's tokens are the torch engine's and transformers' (the EOS that ends a text kept, as
    both keep it); beam 4: the torch engine's four beams, in its order. The copy's logits are the checkpoint's
    within the derived tolerance (the released rows; the four copied rows are held down on both)."""
    from dotformer.decoding.config import generation_config
    from dotformer.decoding.inputs import encode_prompt, text_rules

    family, checkpoint, hf_model = imported
    torch_engine, ct2 = engines(checkpoint)
    loaded = torch_engine.checkpoint
    rules = text_rules(loaded.info)
    assert list(rules.eos_ids) == [i + 4 for i in eos_ids_of(family)]
    window = loaded.context_window
    ended = 0
    for text in PROMPTS:
        ids = encode_prompt(loaded.tgt_tokenizer, text, rules)
        released = released_prompt(family, checkpoint.parent / "hf", text)
        assert [i - 4 for i in ids[rules.add_bos :]] == released[rules.add_bos :]  # after BOS (a copy of the bos row)

        logits = np.array(ct2.generator.forward_batch([[ct2.vocab[i] for i in ids]]))  # (1, T, V + 4)
        with torch.no_grad():
            expected = loaded.model.generator(loaded.model.decode(torch.tensor([ids])).hidden)  # (1, T, V + 4)
        tolerance = logits_tolerance(loaded.config, expected)
        np.testing.assert_allclose(logits[..., 4:], expected.numpy()[..., 4:], atol=tolerance, rtol=0)

        greedy = generation_config(STEPS, "greedy")
        released = released_prompt(family, checkpoint.parent / "hf", text)
        theirs = [t + 4 for t in hf_greedy(hf_model, released, eos_ids_of(family))]
        (ours,) = torch_engine.generate(ids, greedy, window, None, rules.eos_ids)
        (fast,) = ct2.generate(ids, greedy, window, None, rules.eos_ids)
        assert fast == ours == theirs, (family, text)
        ended += theirs[-1] in rules.eos_ids and len(theirs) < STEPS

        beam = generation_config(STEPS, "beam", 4, beam_size=4)
        assert ct2.generate(ids, beam, window, None, rules.eos_ids) == torch_engine.generate(
            ids, beam, window, None, rules.eos_ids
        ), (family, text)
    assert ended >= 1  # the test can tell: a text ends at the model's EOS (Llama 3: its second one)


def test_generate_on_either_engine_from_the_command_line(
    imported: tuple[str, Path, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dotformer generate --engine ctranslate2`` prints the torch engine's text, greedy and ``--beam 4``; so does
    ``--engine auto``, and it runs CTranslate2: the test knows because the torch engine's generate is made to fail
    for that run (``auto`` falls back to torch only on a refusal, which would then show)."""
    from dotformer.cli import main
    from dotformer.engines.torch import TorchEngine

    _, checkpoint, _ = imported
    for search in (["--greedy"], ["--beam", "4"]):
        outputs = {}
        for engine in ("torch", "ctranslate2", "auto"):
            if engine == "auto":

                def refuse(*args: Any, **kwargs: Any) -> Any:
                    raise AssertionError("--engine auto ran the torch engine")

                monkeypatch.setattr(TorchEngine, "generate", refuse)
            argv = ["generate", "--checkpoint", str(checkpoint), "--engine", engine, *search]
            for text in PROMPTS:
                assert main([*argv, "--max-new-tokens", str(STEPS), "--prompt", text]) == 0
            outputs[engine] = capsys.readouterr().out
        monkeypatch.undo()
        assert outputs["ctranslate2"] == outputs["torch"] == outputs["auto"], search
        assert outputs["torch"].count("\n") >= len(PROMPTS)


def test_gemma2_stays_on_torch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma 2 soft-caps its attention scores, which CTranslate2 cannot: ``--engine ctranslate2`` is refused in one
    line saying so, ``--engine auto`` generates on torch (the torch engine's text)."""
    from dotformer.cli import main

    save_family("gemma2", tmp_path / "hf")
    import_dir(tmp_path / "hf", tmp_path / "ckpt")
    capsys.readouterr()  # transformers' progress bars
    argv = ["generate", "--checkpoint", str(tmp_path / "ckpt"), "--greedy", "--max-new-tokens", "8", "--prompt", "a"]
    assert main([*argv, "--engine", "ctranslate2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "--engine ctranslate2: ModelConfig.attention_softcap=" in error and "no soft cap" in error
    assert "\n" not in error
    assert main([*argv, "--engine", "torch"]) == 0
    reference = capsys.readouterr().out
    assert main([*argv, "--engine", "auto"]) == 0
    assert capsys.readouterr().out == reference != ""


def test_an_exported_import_ends_at_its_eos_with_ctranslate2s_defaults(
    imported: tuple[str, Path, Any], tmp_path: Path
) -> None:
    """``dotformer export --to ct2`` of an imported model names its first EOS id as CTranslate2's end token: a
    ``Generator`` with default options continues a prompt with the torch engine's greedy tokens up to that EOS."""
    import json

    from dotformer.cli import main
    from dotformer.decoding.config import generation_config
    from dotformer.decoding.inputs import encode_prompt, text_rules

    _, checkpoint, _ = imported
    out = tmp_path / "ct2"
    assert main(["export", "--to", "ct2", str(checkpoint), str(out)]) == 0
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    torch_engine, _ = engines(checkpoint)
    loaded = torch_engine.checkpoint
    rules = text_rules(loaded.info)
    assert json.loads((out / "config.json").read_text())["eos_token"] == vocabulary[rules.eos_ids[0]]
    generator = ctranslate2.Generator(str(out), device="cpu", intra_threads=1)
    for text in PROMPTS:
        ids = encode_prompt(loaded.tgt_tokenizer, text, rules)
        (result,) = generator.generate_batch(
            [[vocabulary[i] for i in ids]], max_length=STEPS, include_prompt_in_result=False
        )
        (ours,) = torch_engine.generate(
            ids, generation_config(STEPS, "greedy"), loaded.context_window, None, rules.eos_ids[:1]
        )
        assert [vocabulary.index(t) for t in result.sequences[0]] == [t for t in ours if t != rules.eos_ids[0]]

"""How fast could greedy decoding be on this machine? dotformer and HF ``generate`` against a floor without overhead.

The decoding benchmark (``decoding.py``) found dotformer and HF ``generate`` at parity on CPU. This experiment asks
how much of a decoding step is overhead that a faster implementation could remove. It times, on the same random
model and batch as ``decoding.py``:

* ``dotformer``: :func:`dotformer.decoding.decode_batch`, greedy (what users run);
* ``hf_generate``: HF ``generate`` on the Marian copy of the model;
* ``floor_eager``: the same greedy search written as one flat loop over the model's own weights: a preallocated
  key/value cache written in place, no masks or checks, no module calls besides ``nn.Linear``/``nn.LayerNorm``, no
  row dropping. It runs exactly the arithmetic the model needs and nothing else (its tokens are checked equal to
  dotformer's);
* ``floor_compiled`` (``--compile``): that loop through ``torch.compile`` (Inductor's C++ code for everything but the
  GEMMs; the whole loop is one graph), the most that removing Python and fusing the small ops could give.

If the floor is close to HF, no rewrite of the decoding loop can make dotformer several times faster than HF at the
same precision: the step is the GEMMs' time. Post-LN models with sinusoidal positions only (the presets).

Run: ``python benchmarks/decoding_floor.py --threads 1 --configs small [--compile]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from common import command_line, default_output_dir, format_table, machine_info, write_json
from decoding import SETTINGS, dotformer_system, hf_system
from peers import BOS, EOS, make_batch

from dotformer import Transformer


def floor_greedy(model: Transformer, src: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding of (B, S) ``src`` for exactly ``new_tokens`` steps as one flat loop; (B, new_tokens) int64.

    PAD and BOS are forbidden, as in dotformer's search; EOS is not special (a random model never emits it in the
    benchmark's batches; :func:`main` checks the tokens against dotformer's).
    """
    c = model.config
    if c.norm_first or c.positional != "sinusoidal" or c.arch != "encoder-decoder" or c.activation != "relu":
        raise ValueError("the floor is written for post-LN ReLU encoder-decoder models with sinusoidal positions")
    assert model.decoder is not None and model.tgt_embed is not None
    H, D = c.num_heads, c.d_model
    Dh = D // H
    with torch.no_grad():
        src_mask = (src != c.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        memory = model.encode(src, src_mask).memory  # (B, S, D)
        B, S, _ = memory.shape
        layers = list(model.decoder.layers)
        cross_kv = []
        for layer in layers:
            attn = layer.cross_attn
            k = attn.W_k(memory).view(B, S, H, Dh).transpose(1, 2)  # (B, H, S, Dh)
            v = attn.W_v(memory).view(B, S, H, Dh).transpose(1, 2)  # (B, H, S, Dh)
            cross_kv.append((k, v))
        keys = [memory.new_empty(B, H, new_tokens, Dh) for _ in layers]  # preallocated self-attention cache
        values = [memory.new_empty(B, H, new_tokens, Dh) for _ in layers]
        embedding = model.tgt_embed.token.weight  # (V, D)
        positions = model.tgt_embed.position.encoding(new_tokens)  # (new_tokens, D)
        token = torch.full((B,), BOS, dtype=torch.int64)
        out = []
        for t in range(new_tokens):
            x = (F.embedding(token, embedding) * math.sqrt(D) + positions[t])[:, None]  # (B, 1, D)
            for i, layer in enumerate(layers):
                attn = layer.self_attn
                q = attn.W_q(x).view(B, 1, H, Dh).transpose(1, 2)  # (B, H, 1, Dh)
                keys[i][:, :, t] = attn.W_k(x).view(B, H, Dh)
                values[i][:, :, t] = attn.W_v(x).view(B, H, Dh)
                o = F.scaled_dot_product_attention(q, keys[i][:, :, : t + 1], values[i][:, :, : t + 1])
                x = layer.res_self.norm(x + attn.W_o(o.transpose(1, 2).reshape(B, 1, D)))
                attn = layer.cross_attn
                q = attn.W_q(x).view(B, 1, H, Dh).transpose(1, 2)  # (B, H, 1, Dh)
                o = F.scaled_dot_product_attention(q, *cross_kv[i], attn_mask=src_mask)
                x = layer.res_cross.norm(x + attn.W_o(o.transpose(1, 2).reshape(B, 1, D)))
                ff = layer.feed_forward
                x = layer.res_ff.norm(x + ff.W_2(F.relu(ff.W_1(x))))  # (B, 1, D)
            log_probs = model.generator(x[:, 0]).log_softmax(dim=-1)  # (B, V)
            log_probs[:, : BOS + 1] = -math.inf  # PAD and BOS (ids 0, 1)
            token = log_probs.argmax(dim=-1)  # (B,)
            out.append(token)
        return torch.stack(out, dim=1)  # (B, new_tokens)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the experiment, print the table and write ``out/decoding_floor.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="small", help="comma-separated: tiny, small, base")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (each runs every system once)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--compile", action="store_true", help="also time the floor through torch.compile")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds: checks that it runs")
    parser.add_argument("--out", default=str(default_output_dir() / "decoding_floor.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from dotformer.export.marian import to_marian

    rows = []
    for name in ["tiny"] if args.quick else args.configs.split(","):
        setting = SETTINGS[name]
        torch.manual_seed(0)
        model = Transformer(setting.config()).eval()
        src = make_batch(setting.batch_size, setting.src_len, 2, setting.vocab, setting.vocab, seed=1).src
        n = setting.new_tokens
        ours = dotformer_system(model, src, n, beam=1)
        reference = ours()
        if any(EOS in row for row in reference):
            raise SystemExit("the random model emitted EOS: the floor (which ignores EOS) would do other work")
        systems: dict[str, Callable[[], Any]] = {
            "dotformer": ours,
            "hf_generate": hf_system(to_marian(model), src, n, beam=1),
            "floor_eager": lambda model=model, src=src, n=n: floor_greedy(model, src, n),
        }
        notes = {"floor_eager": f"tokens equal dotformer's: {floor_greedy(model, src, n).tolist() == reference}"}
        if args.compile:
            compiled = torch.compile(floor_greedy)
            start = time.perf_counter()
            compiled(model, src, n)
            notes["floor_compiled"] = f"first call (compilation) {time.perf_counter() - start:.0f} s"
            systems["floor_compiled"] = lambda compiled=compiled, model=model, src=src, n=n: compiled(model, src, n)
        repeats = 2 if args.quick else args.repeats
        samples: dict[str, list[float]] = {s: [] for s in systems}
        for fn in systems.values():
            fn()  # warm-up
        for r in range(repeats):
            order = list(systems)[r % len(systems) :] + list(systems)[: r % len(systems)]
            for s in order:
                start = time.perf_counter()
                systems[s]()
                samples[s].append(time.perf_counter() - start)
        hf = statistics.median(samples["hf_generate"])
        for s in systems:
            median = statistics.median(samples[s])
            rows.append(
                {
                    "setting": name,
                    "system": s,
                    "ms_per_batch": median * 1000,
                    "tokens_per_s": setting.batch_size * n / median,
                    "speed_vs_hf": hf / median,
                    "note": notes.get(s, ""),
                }
            )
    print(format_table(rows, ["setting", "system", "ms_per_batch", "tokens_per_s", "speed_vs_hf", "note"]))
    payload = {"benchmark": "decoding_floor", "command": command_line(), "machine": machine_info(), "rows": rows}
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()

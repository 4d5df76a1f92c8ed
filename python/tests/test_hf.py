"""locks.hf against transformers' own SDPA path, on a small Llama built from a config
with random weights (nothing downloaded). Runs on the CPU (float32 model, fp16 LOCKS
pages) when torch and transformers are installed, and on CUDA (bf16) when a GPU is there."""
import pytest

try:  # a broken install (CUDA libraries missing, say) counts as none: skip, don't fail
    import torch
except Exception as e:  # noqa: BLE001
    pytest.skip(f"torch is not importable here: {e}", allow_module_level=True)
try:
    import transformers
except Exception as e:  # noqa: BLE001
    pytest.skip(f"transformers is not importable here: {e}", allow_module_level=True)

import locks.hf  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

import os  # noqa: E402

# LOCKS_HF_DEVICES=cuda (the device run) skips the CPU variant
_want = os.environ.get("LOCKS_HF_DEVICES", "cpu,cuda").split(",")
DEVICES = [("cpu", torch.float32, 2e-3)] if "cpu" in _want else []
if torch.cuda.is_available() and "cuda" in _want:
    DEVICES.append(("cuda", torch.bfloat16, 3e-2))


def tiny_llama(device, dtype, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                      max_position_embeddings=4096, rope_theta=10000.0, attn_implementation="sdpa")
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return model


def decode_logits(model, ids, steps, cache):
    """Prefill ids [1, n], then teacher-force ``steps`` more tokens; logits of each step."""
    out = model(ids[:, :-steps], past_key_values=cache, use_cache=True)
    logits = [out.logits[:, -1]]
    for i in range(steps):
        tok = ids[:, ids.shape[1] - steps + i: ids.shape[1] - steps + i + 1]
        out = model(tok, past_key_values=cache, use_cache=True)
        logits.append(out.logits[:, -1])
    return torch.stack(logits).float()


@pytest.mark.parametrize("device,dtype,tol", DEVICES)
def test_budget_at_context_equals_sdpa(rng, device, dtype, tol):
    seed = int(rng.integers(1 << 30))
    model = tiny_llama(device, dtype, seed)
    n, steps = int(rng.integers(150, 400)), 6
    ids = torch.from_numpy(rng.integers(0, 512, size=(1, n + steps))).to(device)
    with torch.no_grad():
        ref = decode_logits(model, ids, steps, DynamicCache(config=model.config))
        locks.hf.enable(model, budget=4096)
        got = decode_logits(model, ids, steps, locks.hf.LocksCache(model, budget=4096, max_new_tokens=steps))
        sparse = decode_logits(model, ids, steps, locks.hf.LocksCache(model, budget=64, max_new_tokens=steps))
    scale = ref.abs().max().item()
    err = (got - ref).abs().max().item() / scale
    assert err < tol, f"budget >= context: max |logit diff| / max |logit| = {err:.2e}"
    # the prefill is dense in both, so its logits are the same computation
    assert torch.equal(got[0], ref[0])
    # a budget of 64 tokens (4 pages of ~20) must change the decode logits: the
    # comparison above can tell LOCKS attention from SDPA
    assert (sparse[1:] - ref[1:]).abs().max().item() / scale > 10 * err


@pytest.mark.parametrize("device,dtype,tol", DEVICES)
def test_generate_through_locks(rng, device, dtype, tol):
    model = tiny_llama(device, dtype, int(rng.integers(1 << 30)))
    ids = torch.from_numpy(rng.integers(0, 512, size=(2, 200))).to(device)
    with torch.no_grad():
        first = model(ids).logits[:, -1].argmax(-1)
        locks.hf.enable(model, budget=96)
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
        locks.hf.disable(model)
    assert out.shape == (2, 208)
    assert torch.equal(out[:, :200], ids)
    assert torch.equal(out[:, 200], first)  # the first new token comes from the dense prefill


def static_decode(model, ids, steps, cache, graph):
    """decode_logits through a LocksStaticCache; with graph, the first decode step runs
    eagerly and the others are replays of one captured forward (static token/position)."""
    n0 = ids.shape[1] - steps
    out = model(ids[:, :n0], past_key_values=cache, use_cache=True)
    logits = [out.logits[:, -1].clone()]
    tok = ids[:, n0:n0 + 1].clone()
    pos = torch.tensor([[n0]], device=ids.device)
    if not graph:
        for i in range(steps):
            out = model(ids[:, n0 + i:n0 + i + 1], past_key_values=cache, position_ids=pos + i, use_cache=True)
            logits.append(out.logits[:, -1].clone())
        return torch.stack(logits).float()
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        step = model(tok, past_key_values=cache, position_ids=pos, use_cache=True)
    for i in range(steps):
        tok.copy_(ids[:, n0 + i:n0 + i + 1])
        pos.fill_(n0 + i)
        g.replay()
        logits.append(step.logits[:, -1].clone())
    torch.cuda.synchronize()
    return torch.stack(logits).float()


@pytest.mark.skipif(not torch.cuda.is_available() or "cuda" not in _want, reason="needs CUDA")
def test_static_cache_in_cuda_graph(rng):
    """LocksStaticCache: decode steps replayed from one torch.cuda.graph capture give the
    eager steps' logits, match SDPA at a budget >= the context, and a small budget
    (whose selection depends on the pages summarised inside the graph) matches its
    eager run."""
    model = tiny_llama("cuda", torch.bfloat16, int(rng.integers(1 << 30)))
    n, steps = int(rng.integers(150, 400)), 36  # crosses >= 2 page boundaries
    ids = torch.from_numpy(rng.integers(0, 512, size=(1, n + steps))).cuda()
    with torch.no_grad():
        ref = decode_logits(model, ids, steps, DynamicCache(config=model.config))
        locks.hf.enable(model, budget=4096)
        runs = {}
        for budget in (4096, 64):
            for graph in (False, True):
                cache = locks.hf.LocksStaticCache(model, max_cache_len=n + steps + 8, budget=budget)
                runs[budget, graph] = static_decode(model, ids, steps, cache, graph)
                cache.check()
        locks.hf.disable(model)
    scale = ref.abs().max().item()
    err = lambda a, b: (a - b).abs().max().item() / scale  # noqa: E731
    assert err(runs[4096, False], ref) < 3e-2
    assert err(runs[4096, True], ref) < 3e-2
    assert err(runs[4096, True], runs[4096, False]) < 1e-2
    assert err(runs[64, True], runs[64, False]) < 1e-2
    # the small budget differs from dense, so the last comparison can tell selections apart
    assert err(runs[64, False][1:], ref[1:]) > 5 * err(runs[4096, False], ref)

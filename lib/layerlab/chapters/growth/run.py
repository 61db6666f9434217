"""The growth chapter's run: Growth Transformer Training (GTT) against uniform training, progressive
stacking and MSLT (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6; spec anatomy.md sections
3.10, 4.7, 5 "A11-A13" and 6 "GTT ledger"), plus the book's model family.

Protocol [reconstructed]: one architecture (a small Llama-style decoder, ``preset.depth`` layers),
the family's BPE tokenizer and training windows; held-out text = every document of the validation and
test splits (never a training document), ``windows_per_doc`` windows of each.
1. Learning-rate sweep of the uniform baseline (seed 0), chosen by the training loss of the last quarter
   of its steps (fresh batches; the held-out documents are not used to tune anything); a best rate at an edge
   of the grid adds the next rate beyond it (:func:`sweep_lr`). Each sweep run also measures its importance
   profile, so that step 2 finds seed 0's run at the chosen rate in the cache.
2. In parallel processes: every seed's uniform run and the ablation sweep of its trained layers on training
   documents (:mod:`layerlab.chapters.growth.importance`), together with stacking and MSLT (no claim uses
   their wall-clock).
3. For every seed, GTT with the phase order of that seed's profile and a repeat of the seed's uniform run, in one
   process, one thread, their steps alternating (:func:`train_pair`,
   :func:`layerlab.training.train.train_interleaved`), so that a machine whose speed drifts over seconds slows
   both alike. ``workers`` such pairs train at a time, one process each, and nothing else of the chapter runs
   beside them: every timed step shares the machine with the same kind of work. The repeat does the uniform
   run's work again (its final weights are compared with the pooled run's, ``repeat_identical``) and gives the
   uniform seconds that G1c and G2 compare with GTT's. GTT's full cost is the uniform run + the sweep + GTT.
   GTT keeps its weights at each evaluation step; its held-out scoring waits for step 4.
4. In parallel processes: the scoring of GTT (bit-identical to scoring it inline), and the two uniform
   controls of every seed, on their own cosine schedules of as many steps as GTT's FLOPs buy
   (``uniform-flops``) or as GTT's measured seconds buy at the uniform repeat's measured step time
   (``uniform-wall``).
Every run stores the NLL of every held-out window at evenly spaced steps (plus the step at
:data:`EARLY_FRAC` of the budget) with the cumulative tokens, FLOPs and wall-clock.
:mod:`layerlab.chapters.growth.analysis` turns them into per-seed paired statistics. Runs are cached
as JSON (``growth-run``), keyed by everything that defines them; the whole result is cached too.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import layerlab.chapters.growth.analysis as analysis  # module imports: the run's cache key covers
import layerlab.chapters.growth.importance as importance  # what it runs, not the package (claims, plots, prose)
from layerlab.chapters.growth.presets import ANALYSIS_FIELDS, ARMS, GrowthPreset
from layerlab.chapters.growth.result import GrowthResult, assemble, family_view
from layerlab.core import machine
from layerlab.core.cache import cached, cached_json
from layerlab.core.fingerprints import fingerprint
from layerlab.core.protocol import provenance
from layerlab.data.fetch import data_fingerprint
from layerlab.training import growth

EARLY_FRAC = 416 / 656
"""The digest's "416 steps beat 656": GTT read at this fraction of its steps (claim G4)."""


def _train_key(preset: GrowthPreset) -> dict:
    """The preset fields that define what is trained (the test seed, profile name and workers do not)."""
    return {k: v for k, v in dataclasses.asdict(preset).items() if k not in ANALYSIS_FIELDS}


def _pick(doc_ids: list[str], per_doc: int, n_docs: int | None, seed: int) -> tuple[np.ndarray, list[str]]:
    """Indices of up to ``per_doc`` windows (seeded, in corpus order) of each of ``n_docs`` documents
    (all when None; else a seeded choice), and the chosen documents' names."""
    rng = np.random.default_rng(seed)
    names = sorted(set(doc_ids))
    if n_docs is not None and n_docs < len(names):
        names = sorted(rng.choice(names, size=n_docs, replace=False).tolist())
    arr = np.asarray(doc_ids)
    keep = []
    for d in names:
        idx = np.nonzero(arr == d)[0]
        keep.extend(np.sort(rng.choice(idx, size=min(per_doc, len(idx)), replace=False)).tolist())
    return np.asarray(keep), names


def heldout(preset: GrowthPreset) -> dict:
    """Held-out and importance windows with their documents (cached): ``val_ids`` [N, T], ``val_doc``
    [N] (index into ``val_docs``), ``imp_ids`` [M, T], ``imp_doc`` [M] (training documents)."""
    from layerlab.data import corpora
    from layerlab.training.family import PRESETS as FAM
    from layerlab.training.family import family_tokenizer

    tok = family_tokenizer(preset.family)
    T = FAM[preset.family].seq_len
    key = {"tok": fingerprint(tok.get_vocab()), "T": T, "data": data_fingerprint(),
           **{k: getattr(preset, k) for k in ("heldout_splits", "windows_per_doc", "imp_docs", "imp_windows_per_doc")}}

    def compute() -> dict:
        ids, docs = [], []
        for split in preset.heldout_splits:
            w = corpora.token_windows(tok, split, window=T, seed=0)
            keep, _ = _pick(w.doc_ids, preset.windows_per_doc, None, 0)
            ids.append(w.input_ids[keep])
            docs += [w.doc_ids[i] for i in keep]
        tw = corpora.token_windows(tok, "train", window=T, seed=0)
        ikeep, _ = _pick(tw.doc_ids, preset.imp_windows_per_doc, preset.imp_docs, 1)
        val_docs, imp_docs = sorted(set(docs)), sorted({tw.doc_ids[i] for i in ikeep})
        return {"val_ids": torch.cat(ids).tolist(), "val_doc": [val_docs.index(d) for d in docs], "val_docs": val_docs,
                "imp_ids": tw.input_ids[ikeep].tolist(), "imp_doc": [imp_docs.index(tw.doc_ids[i]) for i in ikeep],
                "imp_docs": imp_docs}

    return cached_json("growth-windows", key, compute)


def _data(preset: GrowthPreset):
    from layerlab.training.family import family_tokenizer, family_windows

    tok = family_tokenizer(preset.family)
    return tok, family_windows(preset.family, "train"), heldout(preset)


def _spec(preset: GrowthPreset, vocab: int):
    from layerlab.training.family import PRESETS as FAM
    from layerlab.training.train import ModelSpec

    fam = FAM[preset.family]
    return ModelSpec(depth=preset.depth, width=preset.width, heads=fam.heads, kv_heads=fam.kv_heads,
                     vocab_size=vocab, seq_len=fam.seq_len)


def make_schedule(arm: str, preset: GrowthPreset, lr: float, importance=None, anti=None,
                  steps: int | None = None) -> growth.Schedule:
    """The schedule of ``arm`` for ``preset`` at peak learning rate ``lr`` (``steps``: the uniform
    controls' own, shorter budget)."""
    L, S, w = preset.depth, preset.steps if steps is None else steps, preset.warmup
    if arm in ("uniform", "uniform-flops", "uniform-wall"):
        return growth.uniform(L, S, lr=lr, warmup=min(w, S - 1))
    if arm == "gtt":
        if importance is None:
            raise ValueError("the gtt arm needs an importance profile (one value per layer)")
        return growth.gtt(importance, S, lr=lr, warmup=w, anti=anti)
    if arm == "stacking":
        return growth.stacking(L, S, lr=lr, warmup=w)
    if arm == "mslt":
        return growth.mslt(L, S, lr=lr, warmup=w)
    raise ValueError(f"unknown arm {arm!r}: choose one of {ARMS} or a uniform control")


def planned_flops(preset: GrowthPreset, schedule: growth.Schedule, vocab: int) -> int:
    """Training FLOPs of ``schedule`` by the trainer's ledger, before training (the ledger is a function
    of the schedule: it is what :func:`layerlab.training.train.train` will count)."""
    from layerlab.training.train import flops_per_token

    cfg = _spec(preset, vocab).config()
    T = _spec(preset, vocab).seq_len
    total = 0
    for i, p in enumerate(schedule.phases):
        f = flops_per_token(cfg, T, schedule.active_in(i, preset.depth), p.layers, p.trains_embed(), p.head)
        total += p.steps * preset.batch_size * T * sum(f.values())
    return int(total)


def _eval_steps(preset: GrowthPreset, total: int) -> tuple[int, ...]:
    """Evenly spaced evaluation steps (``preset.n_evals`` after step 0) plus the step at :data:`EARLY_FRAC`."""
    grid = np.linspace(0, total, preset.n_evals + 1).round().astype(int).tolist()
    return tuple(sorted({0, total, int(round(EARLY_FRAC * total)), *grid}))


def _run_key(preset: GrowthPreset, arm: str, seed: int, lr: float, sched: growth.Schedule, **flags) -> dict:
    """The cache key of one arm x seed: what is trained (preset, data, arm, seed, lr, schedule) plus ``flags``."""
    return {"preset": _train_key(preset), "data": data_fingerprint(), "arm": arm, "seed": seed, "lr": lr,
            "schedule": dataclasses.asdict(sched), **flags}


def _train(preset: GrowthPreset, sched: growth.Schedule, arm: str, seed: int, lr: float, *,
           with_importance: bool) -> dict:
    """Train one arm x seed and score it at its evaluation steps: its record (``weights``: a fingerprint of the
    final weights)."""
    from layerlab.training.train import TrainConfig, build_model, train

    tok, train_ids, ho = _data(preset)
    S = sched.total_steps
    cfg = TrainConfig(batch_size=preset.batch_size, seed=seed, eval_steps=_eval_steps(preset, S),
                      eval_per_window=True)
    t0 = time.perf_counter()
    model = build_model(_spec(preset, len(tok)), seed=seed, dtype=preset.torch_dtype).to(preset.device)
    res = train(model, sched, train_ids, cfg, val_ids=torch.tensor(ho["val_ids"]), progress=False)
    out = {**_record(preset, res, arm, seed, lr, sched, timed=False), "seconds": time.perf_counter() - t0}
    if with_importance:
        t1 = time.perf_counter()
        imp = importance.measure(model.cpu(), torch.tensor(ho["imp_ids"]), ho["imp_doc"], preset.ablation)
        out["importance"] = {**imp, "seconds": time.perf_counter() - t1}
        out["seconds"] = time.perf_counter() - t0  # training, scoring and sweep
    return out


def _record(preset: GrowthPreset, res, arm: str, seed: int, lr: float, sched: growth.Schedule, *,
            timed: bool) -> dict:
    """The JSON record of a finished run (:class:`layerlab.training.train.TrainResult` ``res``)."""
    return {"arm": arm, "seed": seed, "lr": lr, "steps": sched.total_steps, "evals": res.evals,
            "ledger": res.ledger, "totals": res.totals, "schedule": growth.describe(sched),
            "train_loss": [r["loss"] for r in res.log], "mode": sched.mode, "timed": timed,
            "weights": fingerprint(dict(res.model.state_dict())),
            "machine": machine.describe(preset.device)}  # where its seconds were measured


def train_pair(preset: GrowthPreset, seed: int, lr: float, importance_, anti, *, at_once: int = 1,
               threads: int | None = None) -> dict:
    """GTT (phase order from ``importance_`` and ``anti``) and a repeat of the seed's uniform run, trained in
    one process with their steps alternating (:func:`layerlab.training.train.train_interleaved`); cached as
    ``growth-train``. These are the seconds G1c and G2 compare: run it with nothing else beside it but other
    pairs. ``at_once``: how many pairs train at the same time, one process each (recorded with the seconds as
    ``at_once``; not part of the key: it changes no weight). ``threads``: torch threads of this process.
    Returns ``gtt`` (its record, unscored, with the weights at every evaluation step: ``snapshots``;
    :func:`run_arm` with ``timed=True`` scores them later, in any process), ``uniform`` (the repeat's record; its
    ``evals`` carry only the cumulative seconds at each evaluation step) and ``seconds`` (the pair's
    wall-clock)."""
    scheds = {"gtt": make_schedule("gtt", preset, lr, importance_, anti),
              "uniform": make_schedule("uniform", preset, lr)}
    key = {arm: _run_key(preset, arm, seed, lr, sched) for arm, sched in scheds.items()}

    def compute() -> dict:
        from layerlab.training.train import TrainConfig, build_model, train_interleaved, train_steps

        if threads:
            torch.set_num_threads(threads)
        tok, train_ids, _ = _data(preset)
        runs = []
        for arm, sched in scheds.items():
            cfg = TrainConfig(batch_size=preset.batch_size, seed=seed, defer_eval=arm == "gtt",
                              eval_steps=_eval_steps(preset, sched.total_steps) if arm == "gtt" else ())
            model = build_model(_spec(preset, len(tok)), seed=seed, dtype=preset.torch_dtype).to(preset.device)
            runs.append(train_steps(model, sched, train_ids, cfg, progress=False))
        t0 = time.perf_counter()
        g, u = train_interleaved(runs)
        seconds = time.perf_counter() - t0
        cum = [0.0, *itertools.accumulate(r["wall"] for r in u.log)]  # the repeat's seconds after each step
        uni = _record(preset, u, "uniform", seed, lr, scheds["uniform"], timed=True)
        uni["evals"] = [{"step": k, "wall": cum[k]} for k in _eval_steps(preset, len(u.log))]
        return {"gtt": {**_record(preset, g, "gtt", seed, lr, scheds["gtt"], timed=True),
                        "seconds": g.totals["wall"], "snapshots": g.snapshots, "at_once": at_once},
                "uniform": {**uni, "seconds": u.totals["wall"], "at_once": at_once}, "seconds": seconds}

    return cached("growth-train", key, compute)


def timed_uniform(pooled: dict, repeat: dict) -> dict:
    """The seed's uniform record for the claims: the pooled run's scores and importance with the seconds of its
    repeat, timed beside GTT (``totals``, ``ledger`` and every evaluation's cumulative ``wall``).
    ``repeat_identical``: the repeat ended with the pooled run's weights, bit for bit; ``seconds``: the repeat's
    training; ``pool_seconds``: the pooled run's training, scoring and sweep."""
    wall = {e["step"]: e["wall"] for e in repeat["evals"]}
    return {**pooled, "totals": repeat["totals"], "ledger": repeat["ledger"], "timed": True,
            "evals": [{**e, "wall": wall[e["step"]]} for e in pooled["evals"]], "machine": repeat["machine"],
            "repeat_identical": repeat["weights"] == pooled["weights"], "seconds": repeat["seconds"],
            "pool_seconds": pooled["seconds"], "at_once": repeat.get("at_once", 1)}


def run_arm(preset: GrowthPreset, arm: str, seed: int, lr: float, importance_=None, anti=None, *,
            steps: int | None = None, timed: bool = False, with_importance: bool = False,
            threads: int | None = None) -> dict:
    """One arm x seed (cached): per-eval tokens, FLOPs, wall-clock and per-window held-out NLL.
    ``timed``: GTT trained by :func:`train_pair` beside a repeat of uniform training (part of the key); only its
    scoring runs here (``eval_seconds``). ``with_importance``: also measure the ablation profile of the trained
    model (uniform only)."""
    if timed and (steps is not None or arm != "gtt"):
        raise ValueError("a timed run is GTT trained at the preset's full budget beside uniform training "
                         f"(train_pair): pass arm='gtt' and steps=None, not arm={arm!r} and steps={steps}")
    sched = make_schedule(arm, preset, lr, importance_, anti, steps)
    key = _run_key(preset, arm, seed, lr, sched, timed=timed, importance=with_importance)

    def compute() -> dict:
        from layerlab.training.train import build_model, evaluate_snapshots

        if threads:
            torch.set_num_threads(threads)
        if not timed:
            return _train(preset, sched, arm, seed, lr, with_importance=with_importance)
        trained = train_pair(preset, seed, lr, importance_, anti)["gtt"]
        tok, _, ho = _data(preset)
        t0 = time.perf_counter()
        model = build_model(_spec(preset, len(tok)), seed=seed, dtype=preset.torch_dtype).to(preset.device)
        evals = evaluate_snapshots(model, trained["snapshots"], torch.tensor(ho["val_ids"]), per_window=True)
        out = {k: v for k, v in trained.items() if k != "snapshots"}
        return {**out, "evals": evals, "eval_seconds": time.perf_counter() - t0}

    return cached_json("growth-run", key, compute)


def _parallel(preset: GrowthPreset, jobs: list[tuple[tuple, dict]], workers: int,
              fn: Callable[..., Any] | None = None) -> list:
    """``fn(preset, *args, **kwargs)`` (default :func:`run_arm`) for every job, in ``workers`` single-threaded
    processes (here, one thread, when ``workers`` <= 1 or there is one job)."""
    fn = run_arm if fn is None else fn
    if workers <= 1 or len(jobs) <= 1:
        return _alone(lambda: [fn(preset, *a, **k) for a, k in jobs])
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(fn, preset, *a, **{**k, "threads": 1}) for a, k in jobs]
        return [f.result() for f in futs]


def _alone(fn):
    n = torch.get_num_threads()
    try:  # small models train much faster single-threaded
        torch.set_num_threads(1)
        return fn()
    finally:
        torch.set_num_threads(n)


def last_quarter_loss(run: dict) -> float:
    """Mean training loss over the last quarter of the run's steps (fresh batches)."""
    tl = run["train_loss"]
    return float(np.mean(tl[-max(1, len(tl) // 4):]))


def select_lr(sweep: list[dict]) -> float:
    """The sweep's learning rate with the lowest :func:`last_quarter_loss`."""
    return sweep[int(np.argmin([last_quarter_loss(r) for r in sweep]))]["lr"]


def beyond(lr: float, down: bool) -> float:
    """The next rate of the 1-3-10 ladder (..., 1e-3, 3e-3, 1e-2, 3e-2, ...) below (``down``) or above ``lr``."""
    k = int(np.floor(np.log10(lr)))
    ladder = sorted(float(f"{c}e{e}") for e in range(k - 2, k + 3) for c in (1, 3))
    return max(x for x in ladder if x < lr * (1 - 1e-9)) if down else min(x for x in ladder if x > lr * (1 + 1e-9))


def sweep_lr(preset: GrowthPreset, workers: int) -> list[dict]:
    """The uniform baseline (seed 0) at every rate of ``preset.lr_sweep``; while the best rate is an edge of the
    rates tried, one more rate beyond that edge (:func:`beyond`), at most ``preset.lr_extend`` times, so that the
    sweep brackets its optimum where it can. Each run also measures importance (a cache hit in step 2)."""
    def at(rates):
        return _parallel(preset, [(("uniform", preset.seeds[0], x), {"with_importance": True}) for x in rates],
                         workers)

    sweep = at(preset.lr_sweep)
    for _ in range(preset.lr_extend):
        lrs, best = sorted(r["lr"] for r in sweep), select_lr(sweep)
        if len(lrs) < 2 or best not in (lrs[0], lrs[-1]):
            break
        sweep += at([beyond(best, down=best == lrs[0])])
    return sweep


def run_comparison(preset: GrowthPreset, *, workers: int | None = None) -> dict:
    """The whole experiment for ``preset`` (module docstring): LR sweep; uniform runs with their importance, and
    the baselines, in parallel; per seed GTT beside a repeat of uniform training, ``workers`` pairs at a time and
    nothing else beside them; then GTT's scoring and
    the two uniform controls, in parallel."""
    workers = preset.workers if workers is None else workers
    t0 = time.perf_counter()
    tok, _, ho = _data(preset)
    vocab = len(tok)
    sweep = sweep_lr(preset, workers)  # measures importance too: seed 0's uniform run below is a cache hit
    lr = select_lr(sweep)
    base = [(("uniform", s, lr), {"with_importance": True}) for s in preset.seeds]
    base += [((arm, s, lr), {}) for s in preset.seeds for arm in preset.arms if arm not in ("uniform", "gtt")]
    pooled = _parallel(preset, base, workers)
    uni, others = pooled[:len(preset.seeds)], pooled[len(preset.seeds):]
    profiles = {s: importance.profile(u["importance"]["per_doc"], seed=preset.boot_seed)
                for s, u in zip(preset.seeds, uni)}
    # these wall-clocks are compared (G1c, G2): the pairs train ``workers`` at a time and alone otherwise
    at_once = max(1, min(workers, len(preset.seeds)))
    pairs = _parallel(preset, [((s, lr, profiles[s]["mean"], profiles[s]["anti"]), {"at_once": at_once})
                               for s in preset.seeds], workers, train_pair)
    timed, jobs, controls = [], [], []
    for s, u, pair in zip(preset.seeds, uni, pairs):
        prof = profiles[s]
        timed.append(timed_uniform(u, pair["uniform"]))
        jobs.append((("gtt", s, lr, prof["mean"], prof["anti"]), {"timed": True}))
        f_uni = planned_flops(preset, make_schedule("uniform", preset, lr), vocab)
        f_gtt = planned_flops(preset, make_schedule("gtt", preset, lr, prof["mean"], prof["anti"]), vocab)
        s_flops = max(2, int(round(preset.steps * f_gtt / f_uni)))
        s_wall = max(2, int(round(preset.steps * pair["gtt"]["totals"]["wall"] / pair["uniform"]["totals"]["wall"])))
        controls += [(("uniform-flops", s, lr), {"steps": s_flops}), (("uniform-wall", s, lr), {"steps": s_wall})]
    done = _parallel(preset, controls + jobs, workers)  # the short scoring jobs last: the cores finish together
    gtt, controls_done = done[len(controls):], done[:len(controls)]
    runs = [r for both in zip(timed, gtt) for r in both] + controls_done + others
    return {"profile": preset.profile, "preset": dataclasses.asdict(preset), "best_lr": lr,
            "sweep": [{"lr": r["lr"], "train_loss_last_quarter": last_quarter_loss(r),
                       "final_nll": analysis.final(r, ho["val_doc"])} for r in sweep],
            "profiles": {str(k): v for k, v in profiles.items()}, "runs": runs,
            "val_doc": ho["val_doc"], "val_docs": ho["val_docs"], "imp_docs": ho["imp_docs"],
            "timed_seconds": sum(p["seconds"] for p in pairs), "seconds": time.perf_counter() - t0}


def _compute(preset: GrowthPreset) -> GrowthResult:
    comp = run_comparison(preset)
    _, train_ids, ho = _data(preset)
    prov = provenance("growth", preset, model=f"Llama-style decoder d{preset.depth}-w{preset.width}",
                      tokens=fingerprint(train_ids, torch.tensor(ho["val_ids"])), seed=preset.seeds[0])
    return assemble(preset, comp, family_view(preset.family), prov)


def run(preset: GrowthPreset) -> GrowthResult:
    """The growth chapter for ``preset`` (cached as a whole; the training runs are cached one by one)."""
    return cached("growth-result", {"preset": dataclasses.asdict(preset), "data": data_fingerprint()},
                  lambda: _compute(preset))

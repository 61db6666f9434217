"""The growth chapter's claims on synthetic comparisons (no training): a true effect is supported, no
effect is not supported, the opposite is contradicted, too few seeds are inconclusive and a missing arm
still gets its row; plus the seed-paired analysis it rests on."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest

from layerlab.chapters.growth import analysis
from layerlab.chapters.growth.run import EARLY_FRAC

claims = importlib.import_module("layerlab.chapters.growth.claims")  # the package exports the function

S = 20
DOC = [d for d in range(8) for _ in range(2)]  # 8 documents x 2 windows


def _run(arm, seed, curve, *, flops=10.0, wall=1.0, steps=S, extra_steps=()):
    """A run whose held-out NLL after step k is ``curve(k / steps)`` (+ a per-document offset)."""
    evals = []
    for k in sorted({0, steps, int(round(EARLY_FRAC * steps)), *range(0, steps + 1, 5), *extra_steps}):
        v = curve(k / steps)
        evals.append({"step": k, "tokens": 100 * k, "flops": flops * k, "wall": wall * k, "val_nll": v,
                      "windows": [v + 0.1 * d for d in DOC]})
    r = {"arm": arm, "seed": seed, "steps": steps, "evals": evals, "timed": arm in ("uniform", "gtt"),
         "totals": {"wall": wall * steps, "flops": flops * steps, "tokens": 100 * steps}}
    if arm == "uniform":
        r["importance"] = {"flops": 5.0, "docs": 8, "windows": 16, "operator": "neighbour_avg"}
    return r


def _comp(delta: float, *, flops_ratio: float = 0.4, wall_ratio: float = 0.5, seeds=range(6),
          arms=("uniform", "gtt", "uniform-flops", "uniform-wall", "stacking", "mslt")) -> SimpleNamespace:
    """GTT's curve = uniform's + ``delta`` x progress (final ΔNLL = delta); other arms follow uniform.
    Each seed adds its own small shift to every arm (shared by the pair) and to GTT alone (noise)."""
    rng = np.random.default_rng(1)
    runs = []
    for s in seeds:
        shift, noise, tnoise = rng.normal(0, 0.05), rng.normal(0, 0.01), rng.normal(0, 0.02)

        def base(t, shift=shift):
            return 6.0 - 2.0 * t + shift
        for arm in arms:
            if arm == "gtt":
                runs.append(_run(arm, s, lambda t, b=base, n=noise: b(t) + delta * t + n * t, flops=10 * flops_ratio,
                                 wall=wall_ratio + tnoise))
            elif arm.startswith("uniform-"):
                runs.append(_run(arm, s, base, steps=int(S * (flops_ratio if arm == "uniform-flops" else wall_ratio))))
            else:
                runs.append(_run(arm, s, base))
    return SimpleNamespace(comparison={"runs": runs, "val_doc": DOC, "preset": {"steps": S, "boot_seed": 0}},
                           numbers={"seeds": len(seeds), "repeat_identical": len(seeds)})


def _rows(result):
    return {c.id: c for c in claims.claims(result)}


IDS = ["G1", "G1b", "G1c", "G2", "G3", "G3-train", "G4", "G5-stacking", "G5-mslt"]


def test_true_effect_is_supported():
    """GTT 1.5 nats lower, 60% fewer FLOPs and half the seconds per step, 6 seeds: every loss row and the
    speed rows are supported; the full-cost G3 is contradicted because GTT's phase order costs a whole
    uniform run (its cost can never be below uniform's)."""
    rows = _rows(_comp(-1.5))
    assert list(rows) == IDS
    for i in ("G1", "G1b", "G1c", "G4", "G5-stacking", "G5-mslt", "G2", "G3-train"):
        assert rows[i].verdict == "supported", (i, rows[i].reading)
        assert rows[i].n == 6 and rows[i].unit == "seeds"
    assert rows["G1"].ours == pytest.approx(-1.5, abs=0.03)
    assert rows["G2"].ours == pytest.approx(50, abs=5)
    assert rows["G3"].verdict == "contradicted" and rows["G3"].ours < 0


def test_no_effect_is_not_supported():
    """GTT = uniform: loss rows 'not supported' (interval within ±0.05 nats); the size claims are below
    80% of the claimed saving, which contradicts them."""
    rows = _rows(_comp(0.0, flops_ratio=1.0, wall_ratio=1.0))
    for i in ("G1", "G1b", "G1c", "G5-stacking", "G5-mslt"):
        assert rows[i].verdict in ("not supported", "inconclusive"), (i, rows[i].reading)
    assert rows["G1"].verdict == "not supported"
    assert rows["G2"].verdict != "supported" and rows["G3-train"].verdict != "supported"


def test_opposite_effect_is_contradicted():
    rows = _rows(_comp(+0.5, flops_ratio=1.0, wall_ratio=1.3))
    for i in ("G1", "G1b", "G1c", "G4", "G5-stacking", "G5-mslt", "G2", "G3"):
        assert rows[i].verdict == "contradicted", (i, rows[i].reading)


def test_too_few_seeds_are_inconclusive():
    """Three seeds: the exact sign-flip test cannot reach p <= 0.025 (its smallest p is 1/8), whatever
    the effect; one seed: no test at all, the rows remain with their reason."""
    rows = _rows(_comp(-1.5, seeds=range(3)))
    assert all(c.verdict == "inconclusive" for c in rows.values())
    assert "smallest attainable p" in rows["G1"].reading
    one = _rows(_comp(-1.5, seeds=[0]))
    assert list(one) == IDS and all(c.verdict == "inconclusive" and c.ours is None for c in one.values())


def test_missing_arms_keep_their_rows():
    rows = _rows(_comp(-1.5, arms=("uniform", "gtt")))
    assert list(rows) == IDS
    for i in ("G1b", "G1c", "G5-stacking", "G5-mslt"):
        assert rows[i].ours is None and rows[i].verdict == "inconclusive" and "not computed" in rows[i].note
    assert rows["G1"].verdict == "supported"
    none = _rows(_comp(-1.5, arms=("stacking",)))
    assert list(none) == IDS and all(c.ours is None for c in none.values())


def test_units_are_shown_next_to_the_estimate():
    import re

    html = claims.table(claims.claims(_comp(-1.5))).to_html()
    ours = dict(re.findall(r'scope="row">([^<]+)</th><td class="claim-claim">[^<]*</td><td class="claim-ours">([^<]*)<',
                           html))
    assert ours["G1"].endswith(" nats") and ours["G2"].endswith(" %")


def test_cost_savings_count_the_importance_run():
    """Full cost = GTT's FLOPs to the target + the uniform run + the sweep: with GTT 2.5x cheaper per step
    on the same curve, the training-only saving is 60% and the full one is negative."""
    c = _comp(0.0, flops_ratio=0.4).comparison
    cs = analysis.cost_savings(c)
    assert cs["training"] == pytest.approx(np.full(6, 60.0), abs=1.5)
    u = analysis.by_seed(c, "uniform")[0]
    assert cs["cost_gtt_full"][0] == pytest.approx(cs["cost_gtt_training"][0] + u["totals"]["flops"] + 5.0)
    assert (cs["full"] < 0).all()


def test_held_out_nll_weighs_documents_equally():
    w = [1.0, 1.0, 1.0, 4.0]  # document 0 has three windows, document 1 one
    assert analysis.doc_mean(w, [0, 0, 0, 1]) == pytest.approx(2.5)
    r = _run("uniform", 0, lambda t: 6.0 - 2.0 * t)
    assert analysis.cost_to_target(r, "flops", 5.35, DOC) == pytest.approx(10.0 * S / 2)  # documents add 0.35
    assert analysis.cost_to_target(r, "flops", 3.0, DOC) == float("inf")
    with pytest.raises(ValueError, match="not evaluated"):
        analysis.at_step(r, 3, DOC)


def test_wall_clock_rows_say_which_machine_timed_them():
    """G1c and G2 rest on seconds: their notes and the page's sentence name the machine the timed runs
    recorded, and say so when none did (runs cached before the record existed)."""
    from layerlab.chapters.growth import prose

    res = _comp(-1.5)
    assert "machine not recorded" in _rows(res)["G2"].note
    assert prose.machine_sentence(res).startswith("The timed runs did not record their machine")
    for r in res.comparison["runs"]:
        r["machine"] = "Intel(R) Xeon(R) Processor (AVX-512, AMX), 2 cores, 1 torch thread"
    rows = _rows(res)
    for i in ("G1c", "G2"):
        assert rows[i].note.endswith("; timed on Intel(R) Xeon(R) Processor (AVX-512, AMX), 2 cores, 1 torch thread")
    assert "timed on" not in rows["G1b"].note  # FLOPs-matched: no seconds in it
    assert "measured on Intel(R) Xeon(R) Processor (AVX-512, AMX)" in prose.machine_sentence(res)
    assert "In all 6 of 6 seeds the uniform repeat" in prose.machine_sentence(res)
    assert "the other" not in prose.machine_sentence(res)
    res.numbers["repeat_identical"] = 4  # a repeat whose weights differ is said to, with how many
    assert "In 4 of 6 seeds" in prose.machine_sentence(res) and "in the other 2 its weights differ" in \
        prose.machine_sentence(res)
    res.comparison["runs"][-1]["machine"] = "AMD EPYC 9B14 (AVX-512), 2 cores, 1 torch thread"  # an untimed run
    assert analysis.timed_on(res.comparison) == ["Intel(R) Xeon(R) Processor (AVX-512, AMX), 2 cores, 1 torch thread"]


def test_machine_is_described_from_cpuinfo():
    from layerlab.core.machine import describe

    amd = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu avx2 avx512f avx512bw\n"
    old = "processor\t: 0\nmodel name\t: Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz\nflags\t\t: fpu sse avx2\n"
    assert describe(cpuinfo=amd).startswith("AMD EPYC 9B14 (AVX-512), ")
    assert describe(cpuinfo=old).startswith("Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz (AVX2), ")
    assert describe(cpuinfo="").split(",")[0]  # no /proc/cpuinfo (macOS, Windows): still a name
    assert "torch thread" in describe(cpuinfo=amd)

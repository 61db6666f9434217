"""The diversity chapter's result (Kamigaito et al. 2025, arXiv:2505.24009; Figs. 3-6, Sec. 5.4 and the
spec's T-LM and depth-family extensions): what :func:`layerlab.chapters.diversity.run.run` returns, with
the tables and glued numbers the notebook shows, assembled from the per-task results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from layerlab.core.protocol import Provenance

ABLATION_TERMS = ["mse", "bias", "div", "omega", "ce", "kl", "acc"]
FAMILY_TERMS = ["acc", "ce", "member_ce", "kl", "mse", "bias", "div", "omega"]
TRADE_COLUMNS = ["corr_bias_omega", "corr_div_omega", "corr_bias_div", "partial_bias_div_given_omega",
                 "bias_floor_onehot", "bias_floor_centred", "member_ce_floor"]


@dataclass(kw_only=True)
class DiversityResult:
    """Everything the diversity chapter shows.

    tasks: per task (in preset order) the dict of :func:`layerlab.chapters.diversity.run.run_task`;
    headline: the task whose numbers fill the claim table's "ours" column (the preset's first task);
    lm: the T-LM sweep (:func:`~layerlab.chapters.diversity.run.run_lm`); random_init: the random-init
    null (:func:`~layerlab.chapters.diversity.run.run_random_init`); family: the depth family's rows
    (:func:`~layerlab.chapters.diversity.run.run_family`), None when there is none; family_members: the
    whole family's table (:func:`layerlab.training.regime.members_table`), from which its regime
    and the depths a comparison may use are read (:mod:`~layerlab.chapters.diversity.regime`).
    """

    tasks: dict[str, dict]
    headline: str
    lm: dict
    random_init: dict
    family: pd.DataFrame | None
    provenance: Provenance
    family_members: pd.DataFrame | None = None

    # ------------------------------------------------------------------ tables
    def accuracy_table(self) -> pd.DataFrame:
        """Prompt and linear-head accuracy per task with CIs, and the readout the analysis uses."""
        rows = []
        for n, r in self.tasks.items():
            a = r["accuracy"]
            rows.append({"task": n, "classes": ", ".join(r["classes"]), "n_test": r["n_test"], "chance": r["chance"],
                         "prompt acc": a["prompt"]["acc"],
                         "prompt 95% CI": f"[{a['prompt']['acc_low']:.2f}, {a['prompt']['acc_high']:.2f}]",
                         "head acc": a["head"]["acc"],
                         "head 95% CI": f"[{a['head']['acc_low']:.2f}, {a['head']['acc_high']:.2f}]",
                         "analysed readout": r["primary"]})
        return pd.DataFrame(rows)

    @property
    def example_prompt(self) -> str:
        """The first test prompt of the first task."""
        return self.tasks[self.headline]["example_prompt"]

    def identity_table(self) -> pd.DataFrame:
        """Relative errors of Eq. 1 (live, run dtype) and of the two exact decompositions (fp64)."""
        return pd.DataFrame([{"task": n, "members vs logits (rel., fp32)": r["identity_error"],
                              "MSE = Bias - Div (rel.)": r["identity_mse"]["mse"],
                              "CE = member CE - KL (rel.)": r["identity_mse"]["ce"]} for n, r in self.tasks.items()])

    def peak_table(self) -> pd.DataFrame:
        """D10 per task and readout: the peak depth chosen on one half of the examples, the accuracy drop
        from it to full depth on the other half (95% t-interval) and the full-depth accuracy."""
        rows = []
        for n, r in self.tasks.items():
            for ro, e in r["evidence"].items():
                d = e["D10"]
                rows.append({"task": n, "readout": ro, "peak depth": e["peak"]["depth"],
                             "drop": round(d["estimate"], 3), "95% CI": f"[{d['low']:.3f}, {d['high']:.3f}]",
                             "n": d["n"], "acc (full depth)": round(e["peak"]["acc_final"], 3)})
        return pd.DataFrame(rows)

    def correlations(self) -> pd.DataFrame:
        """Every task's term-accuracy correlations over truncation depths (Fig. 3), stacked."""
        return pd.concat([r["correlations"].assign(task=n) for n, r in self.tasks.items()])

    def correlation_table(self) -> pd.DataFrame:
        """D8 per task and readout: the partial r of each term's depth curve with the accuracy curve
        given depth, its 95% CI over examples and its p (the larger of bootstrap and permutation p)."""
        rows = []
        for n, r in self.tasks.items():
            for ro, e in r["evidence"].items():
                row = {"task": n, "readout": ro}
                for t, d in e["D8"].items():
                    if "missing" in d:
                        row[t] = "—"
                        continue
                    row[t] = f"{d['estimate']:.2f} [{d['low']:.2f}, {d['high']:.2f}] p={d['p_less']:.2g}"
                rows.append(row)
        return pd.DataFrame(rows)

    def gains_table(self) -> pd.DataFrame:
        """Diminishing-returns check and Theorem 7's premise per task."""
        return pd.DataFrame([{"task": n, **r["gains"], **r["premise"]} for n, r in self.tasks.items()])

    def tradeoff_table(self) -> pd.DataFrame:
        """Sec. 5.4 correlations and bias floors per task (index: task)."""
        return pd.DataFrame([{"task": n, **r["tradeoff"]} for n, r in self.tasks.items()]).set_index("task")[
            TRADE_COLUMNS]

    def shuffle_table(self) -> pd.DataFrame:
        """Member-shuffle null per task (index: task)."""
        return pd.DataFrame([{"task": n, **r["shuffle"]} for n, r in self.tasks.items()]).set_index("task")

    def random_init_table(self) -> pd.DataFrame:
        """Trained vs random-init model on the first task: head accuracy, Div and shuffled Div."""
        null, name = self.random_init, self.random_init["task"]
        trained = self.tasks[name]
        return pd.DataFrame([
            {"model": "trained", "task": name, **trained["accuracy"]["head"],
             "div": trained["shuffle"]["div_real"], "div (shuffled)": trained["shuffle"]["div_null_mean"]},
            {"model": "random init", "task": name, **null["accuracy"], "div": null["shuffle"]["div_real"],
             "div (shuffled)": null["shuffle"]["div_null_mean"]}])

    def lm_final(self) -> pd.DataFrame:
        """T-LM terms at full depth (index: term; value with its cluster-bootstrap CI)."""
        s = self.lm["sweep"]
        return s[s.k == s.k.max()].set_index("term")[["value", "low", "high"]]

    def family_table(self, digits: int = 3, *, intervals: bool = False) -> pd.DataFrame | None:
        """The depth family at full depth, one row per (depth, seed, init), or None without a family.

        ``intervals=False``: the estimates (held-out NLL in nats per byte, members M, then each term of
        :data:`FAMILY_TERMS`) rounded to ``digits``. ``intervals=True``: each term's 95% bootstrap interval
        over examples as ``"low–high"``. Two narrow tables rather than one of 30 columns, which no page or
        printed sheet can hold."""
        if self.family is None:
            return None
        f = self.family.sort_values(["depth", "seed", "init"], kind="stable").set_index(["depth", "seed", "init"])
        terms = [t for t in FAMILY_TERMS if t in f.columns]
        if intervals:
            def cell(lo: float, hi: float) -> str:
                return f"{lo:.{digits}f}–{hi:.{digits}f}"

            return pd.DataFrame({t: [cell(lo, hi) for lo, hi in zip(f[f"{t}_low"], f[f"{t}_high"])] for t in terms},
                                index=f.index)
        return f[["heldout_nll", "M", *terms]].rename(columns={"heldout_nll": "held-out NLL"}).round(digits)

    def ablation_table(self) -> pd.DataFrame:
        """Full-depth terms under module-level members, layer-level members and the centred target."""
        rows = []
        for n, r in self.tasks.items():
            variants = (("module, one-hot", r["sweep"]), ("layer, one-hot", r["sweep_layer"]),
                        ("module, centred", r["sweep_centred"]))
            for variant, sw in variants:
                last = sw[sw.k == sw.k.max()].set_index("term")["value"]
                rows.append({"task": n, "variant": variant, "M": int(sw.M.max()), **last[ABLATION_TERMS].to_dict()})
        return pd.DataFrame(rows)

    # ------------------------------------------------------------------ numbers in the prose
    @property
    def numbers(self) -> dict[str, Any]:
        """The numbers the prose glues, nested for ``glue_values("div", ...)`` (``div_acc_prompt_sent``, ...)."""
        t = self.tasks
        lm = self.lm_final()
        return {
            "model": self.provenance.model,
            "acc": {"prompt": {n: round(r["accuracy"]["prompt"]["acc"], 3) for n, r in t.items()},
                    "head": {n: round(r["accuracy"]["head"]["acc"], 3) for n, r in t.items()}},
            "n_test": int(next(iter(t.values()))["n_test"]),
            "acc_summary": "; ".join(f"{n} {r['accuracy']['prompt']['acc']:.2f} / {r['accuracy']['head']['acc']:.2f}"
                                     for n, r in t.items()),
            "identity_err": f"{max(r['identity_error'] for r in t.values()):.1e}",
            "peak": {n: int(r["evidence"][r["primary"]]["peak"]["depth"]) for n, r in t.items()},
            "random_acc": round(self.random_init["accuracy"]["acc"], 3),
            "lm": {"ce": round(float(lm.loc["ce", "value"]), 3), "positions": self.lm["n_positions"]},
        }

"""Chapter 1, "Reading the residual stream": the claim rows, from a :class:`ResidualResult`.

R1 is an identity of the lens definitions (at the final residual both lenses are the model); R2/R2b
the logit-lens expectation that the loss falls with depth (nostalgebraist 2020; the frozen lens of
Kamigaito et al. 2025, Eq. 1); R3 the frozen-lens drop in nats; R4 this environment's perplexity on
the Britannica article; R5 training vs the random-init twin; R6 the growth of pre-LN residual norms.
"""

from __future__ import annotations

import math

from layerlab.chapters.residual.run import ResidualResult
from layerlab.report.claims import Claim, fmt, verdict_from_ci, verdict_identity, verdict_within

__all__ = ["IDENTITY_TOL", "SANITY_BAND", "claims"]

IDENTITY_TOL = {"float32": 1e-4}
"""Tolerance of the R1 identity by parameter dtype (1e-9 for any other, i.e. float64)."""
SANITY_BAND = (34 / 1.3, 34 * 1.3)
"""R4: this environment's reference perplexity (about 34) on the Britannica article, within a factor 1.3."""


def claims(result: ResidualResult) -> list[Claim]:
    """The chapter's claim table rows (R1-R6, R2b), in the order the book prints them."""
    r = result
    tol = IDENTITY_TOL.get(r.model_dtype, 1e-9)
    band = SANITY_BAND
    t, tr, tf, tfr = r.trend, r.trend_random, r.trend_frozen, r.trend_frozen_random
    drop, drop_r, gap, nt = r.drop, r.drop_random, r.gap, r.norm_trend
    return [
        Claim("R1", "The lens of the final residual reproduces the model's logits and loss (both lenses)",
              "exact", "identity", r.ident_err, None, None, f"tolerance {tol:g}",
              verdict_identity(r.ident_err, tol), "max |difference| over sampled positions"),
        Claim("R2", "Recompute-lens loss falls with depth (Spearman rho of depth vs loss < 0)",
              "loss falls with depth", "reconstructed", t.estimate, t.low, t.high,
              f"random init: rho = {fmt(tr.estimate)}", verdict_from_ci(t.low, t.high, "less", 0.0),
              "nostalgebraist (2020); rho over depths 0..L of the mean loss"),
        Claim("R2b", "Frozen-lens loss falls with depth (Spearman rho of depth vs loss < 0)",
              "loss falls with depth", "reconstructed", tf.estimate, tf.low, tf.high,
              f"random init: rho = {fmt(tfr.estimate)}", verdict_from_ci(tf.low, tf.high, "less", 0.0),
              "Kamigaito et al. (2025) Eq. 1 readout; partial sums of residual members"),
        Claim("R3", "The blocks lower the frozen-lens loss: NLL(embedding) - NLL(final) > 0 nats",
              "> 0", "reconstructed", drop.estimate, drop.low, drop.high,
              f"random init: {fmt(drop_r.estimate)} [{fmt(drop_r.low)}, {fmt(drop_r.high)}]",
              verdict_from_ci(drop.low, drop.high, "greater", 0.0),
              "frozen lens (the recompute lens at depth 0 is dominated by the tied embedding)"),
        Claim("R4", "Perplexity on the Britannica 'Shakespeare' article is about 34",
              "≈ 34", "environment", r.sanity.estimate, r.sanity.low, r.sanity.high,
              f"band {band[0]:.0f}-{band[1]:.0f}; random init: {fmt(r.ppl_random.estimate)} (all windows)",
              verdict_within(r.sanity.low, r.sanity.high, band),
              f"{r.preset.model}, windows of {r.preset.window} tokens, {r.sanity_windows} windows"),
        Claim("R5", "Training lowers held-out loss vs the random-init twin (nats/token, paired)",
              "> 0", "reconstructed", gap.estimate, gap.low, gap.high,
              f"random init: NLL {fmt(r.nll_random.estimate)} vs ln V = {fmt(math.log(r.vocab))}",
              verdict_from_ci(gap.low, gap.high, "greater", 0.0), f"{r.random_windows} shared windows"),
        Claim("R6", "The residual norm grows with depth (Spearman rho of depth vs norm > 0)",
              "grows", "reconstructed", nt.estimate, nt.low, nt.high,
              f"random init: rho = {fmt(r.norm_trend_random.estimate)}",
              verdict_from_ci(nt.low, nt.high, "greater", 0.0), "pre-LN residual streams grow with depth"),
    ]

"""The public API: one clear error per bad input at the boundary, the API table resolves and cites its
papers, the library guide's names exist and its quickstart runs, the API reference page is up to date."""

from __future__ import annotations

import importlib.util
import inspect
import re

import pytest
import torch
from _buildbook import ROOT

import layerlab as ll
from layerlab.core.models import ModelLoadError

GUIDE = ROOT / "book" / "api_guide.md"
# names of the paper-derived groups whose docstrings must cite a paper, an equation or the spec section
CITE = re.compile(r"et al\.|arXiv|Eq\.|Theorem|spec(?: section)? \d|section \d|nostalgebraist|Efron|Fisher|Bonett")
UNCITED_GROUPS = {"Models and the architecture adapter", "Data and cache"}
INFRASTRUCTURE = {"capture", "Capture", "run_with_capture", "Intervention", "EvalResult", "component_stack",
                  "CI", "Corr", "SVD", "svd", "LogLinearFit", "MemberFeatures", "Readout", "ChainTerms"}


@pytest.fixture(scope="module")
def model():
    return ll.tiny_model("llama")


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(0))


EMPTY = {"[1, 0]": (1, 0), "[0, 5]": (0, 5)}
EMPTY_MSG = {"[1, 0]": r"has 0 tokens per row \(shape \[1, 0\]\); pass at least",
             "[0, 5]": r"has an empty batch \(shape \[0, 5\]\); pass at least one row"}


# ----------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("case", EMPTY)
def test_empty_inputs(model, case):
    ids, msg, V = _ids(*EMPTY[case]), EMPTY_MSG[case], model.config.vocab_size
    with pytest.raises(ValueError, match="contributions: input_ids " + msg):
        ll.contributions(model, ids)
    with pytest.raises(ValueError, match="run_with_capture: input_ids " + msg):
        ll.run_with_capture(model, ids)
    with pytest.raises(ValueError, match="token_nll: ids " + msg):
        ll.token_nll(torch.zeros(*ids.shape, V), ids)
    with pytest.raises(ValueError, match="evaluate_interventions: input_ids " + msg):
        ll.evaluate_interventions(model, ids, [])
    with pytest.raises(ValueError, match="frozen_context_jacobians: input_ids " + msg):
        ll.block_jacobians(model, ids)


def test_one_token_windows_cannot_be_scored(model):
    with pytest.raises(ValueError, match=r"evaluate_interventions: input_ids has 1 token per row \(shape \[2, 1\]\); "
                                         "pass at least 2 token ids per row"):
        ll.evaluate_interventions(model, _ids(2, 1), [])
    with pytest.raises(ValueError, match=r"token_nll: ids has 1 token per row"):
        ll.token_nll(torch.zeros(1, 1, 259), _ids(1, 1))
    with pytest.raises(ValueError, match="sentence 1 has 1 token per row"):
        ll.evaluate_interventions(model, [_ids(5), _ids(1)], [])
    with pytest.raises(ValueError, match="empty list of sentences"):
        ll.evaluate_interventions(model, [], [])


def test_out_of_vocabulary_ids(model):
    bad = torch.tensor([[1, 2, 300]])
    msg = r"input_ids holds token id 300, outside the vocabulary 0\.\.258; encode the text with this model's tokenizer"
    with pytest.raises(ValueError, match="contributions: " + msg):
        ll.contributions(model, bad)
    with pytest.raises(ValueError, match="frozen_context_jacobians: " + msg):
        ll.block_jacobians(model, bad)
    with pytest.raises(ValueError, match="run_with_capture: " + msg):
        ll.run_with_capture(model, bad)
    with pytest.raises(ValueError, match="token id -1, outside the vocabulary"):
        ll.contributions(model, torch.tensor([[1, -1]]))
    with pytest.raises(ValueError, match="token_nll: ids holds token id 300"):
        ll.token_nll(torch.zeros(1, 3, 259), bad)


def test_wrong_rank_dtype_and_shapes(model):
    with pytest.raises(ValueError, match=r"must be 2-D \[batch, tokens\], got shape \[4\]; for one sequence use ids"):
        ll.contributions(model, _ids(4))
    with pytest.raises(TypeError, match="LongTensor"):
        ll.run_with_capture(model, _ids(1, 4).float())
    with pytest.raises(ValueError, match=r"logits must be \[B, T, V\]"):
        ll.token_nll(torch.zeros(1, 3, 259), _ids(1, 4))
    with pytest.raises(ValueError, match=r"logit_lens: resid must be \[\.\.\., 64\]"):
        ll.logit_lens(model, torch.zeros(2, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"ablate: mean_contrib must be \[d\] = \[64\]"):
        ll.ablate(model, 1, "mean", mean_contrib=torch.zeros(4, 64))


def test_load_model_directories(tmp_path):
    with pytest.raises(ModelLoadError, match=rf"no model files in {re.escape(str(tmp_path))}: expected config.json "
                                             r"and \*\.safetensors \(or a \.gguf\)"):
        ll.load_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match=r"missing \*\.safetensors weights"):
        ll.load_model(str(tmp_path))
    with pytest.raises(ModelLoadError, match="no such model directory .*nope"):
        ll.load_model(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match="no such model directory"):
        ll.load_model("./no/such/model")


# ----------------------------------------------------------------------------- good inputs still work
def test_good_inputs_work(model):
    ids = _ids(2, 6)
    logits, cap = ll.run_with_capture(model, ids)
    torch.testing.assert_close(ll.contributions(model, ids).logits(), logits, rtol=0, atol=1e-8)
    torch.testing.assert_close(ll.logit_lens(model, cap["block_out"][-1]), logits, rtol=0, atol=1e-8)
    assert ll.token_nll(logits, ids).shape == (2 * 5,)
    res = ll.evaluate_interventions(model, ids, ll.sweep_interventions(model, ["skip"], [1]))
    assert res.n_tokens == 10 and bool(torch.isfinite(torch.as_tensor(res.base)).all())
    assert ll.block_jacobians(model, ids[0], layers=[0]).shape == (1, 64, 64)  # one prompt as [n]
    assert ll.contributions(model, ids[:, :1]).members.shape[1] == 1  # a single token is enough here


# ----------------------------------------------------------------------------- the table and the pages
def test_api_table_resolves_and_is_documented():
    assert set(ll.API) == {n for names in ll.GROUPS.values() for n in names}
    assert sum(len(v) for v in ll.GROUPS.values()) == len(ll.API), "a name is listed in two groups"
    missing_doc, missing_cite = [], []
    for group, names in ll.GROUPS.items():
        for name in names:
            obj = getattr(ll, name)
            if not (callable(obj) or isinstance(obj, type)):
                continue  # constants are documented by #: comments at their module
            doc = inspect.getdoc(obj) or ""
            if not doc.strip():
                missing_doc.append(name)
            elif group not in UNCITED_GROUPS and name not in INFRASTRUCTURE and not CITE.search(doc):
                missing_cite.append(name)
    assert not missing_doc, f"public names without a docstring: {missing_doc}"
    assert not missing_cite, f"paper-derived names whose docstring cites no paper/eq/spec section: {missing_cite}"


def test_guide_names_resolve():
    text = GUIDE.read_text()
    names = set(re.findall(r"\bll\.([A-Za-z_]\w*)", text))
    assert {"load_model", "capture", "logit_lens", "contributions", "block_jacobians", "ablate"} <= names
    unknown = sorted(n for n in names if n not in ll.API)
    assert not unknown, f"book/api_guide.md uses names that are not in ll.API: {unknown}"


def test_guide_quickstart_runs():
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(GUIDE), "exec"), {})


def test_api_reference_page_is_up_to_date():
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0, "run: python scripts/api_reference.py"

"""Test-session settings: tiny models run fastest single-threaded (and stay fast when the
machine is shared); notebooks executed by the tests run in their own kernels."""

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)

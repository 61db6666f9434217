"""layerlab: how transformer layers differ.

A small, tested library behind the layerlab book, reproducing and testing
Kamigaito et al. 2025 (diversity), Aubry et al. ICLR 2025 (coupling) and
Wietrzykowski 2026 (anatomy). One module per concept; see DEVELOPERS.md.
"""

__version__ = "0.1.0"

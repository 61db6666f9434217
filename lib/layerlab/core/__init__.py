"""The stable core: model loading and the architecture adapter, residual-stream capture and the
logit lens, block Jacobians, the on-disk cache and the profile registry. Imports nothing from the
rest of layerlab."""

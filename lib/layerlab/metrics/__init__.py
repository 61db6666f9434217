"""One module per defining equation of the papers, with no presets and no I/O. Modules of one paper
never import another paper's modules; shared needs live in ``core``, ``data`` or ``report``."""

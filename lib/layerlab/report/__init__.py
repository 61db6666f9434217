"""Paper-independent reporting: statistics (intervals, tests), claim records and tables, plot style.
Imports only from ``layerlab.core``."""

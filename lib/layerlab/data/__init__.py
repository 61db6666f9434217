"""Text and task data: corpora (document-split windows), their offline sources and fetcher, the
labelled tasks and the family's tokenizer. Imports only from ``layerlab.core``."""

"""How Switchyard's bundled models are made: the synthetic corpus, the tokenizer, the trainers and the quality
gate (`switchyard train-default`, `train-speculator`, `eval-default`). A distribution of its own: it imports
the runtime (`switchyard`), and nothing in the runtime imports it. See training/README.md for the map."""

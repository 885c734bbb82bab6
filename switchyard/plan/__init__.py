"""`switchyard plan`: how much of a model and its KV cache fits on a device, answered by arithmetic alone."""

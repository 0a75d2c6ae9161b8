"""The shared embedding runtime every front end stands on: the backend (one loaded biLM per model, device
and dtype), its caches, windows and per-call token bounds, text rows, the layer mix and pooling, the
tokenizer resolver, and the front ends' defaults and setting checks."""

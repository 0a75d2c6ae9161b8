"""The network a run trains: the language model (token encoder, fused or exact biLSTM, adaptive softmax) and the
pieces of its step (the fused biLSTM's recurrence, target log-probabilities, rounded row counts), its named
architectures and the step's precision."""

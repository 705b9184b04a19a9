"""The models and what runs them: the GPT and its JAX twin, the ViT twin of HF's, their
parity proofs (and the strict-fp32 switch), data, the distributed ranks and the PyTorch/XLA
worker. Imports only `deepdive.core` besides itself."""

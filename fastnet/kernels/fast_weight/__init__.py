"""The sum, delta, gated and gated-delta (Gated DeltaNet, DeltaProduct) rules: reference and kernels."""

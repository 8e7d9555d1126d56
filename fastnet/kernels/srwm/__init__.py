"""The self-referential weight matrix (SRWM): reference and fused recurrent kernel."""

"""Recurrent Delta Net and Delta RNN: reference and fused recurrent kernels."""

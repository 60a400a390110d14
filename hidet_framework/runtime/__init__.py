"""The runtime: a compiled graph (precomputed launches over one arena) and its memory plan."""

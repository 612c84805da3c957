"""Mixing: the split rule, the source contract, the engine and the mixing buffers."""

"""Native CPU kernels for the skinny matrix products of decode, compiled on first use (see native_library)."""

"""Compiled kernels. ``hashing`` holds the scalar hash functions shared by every backend;
the array kernels in ``minhash`` and ``pairs`` run on the CPU (numba) over Arrow string buffers."""

"""The execution engine: where and how partition tasks run, kept out of the algorithm modules.

``backend`` chooses the CPU or GPU implementation of the kernels (in one place); ``executor`` runs task
graphs on local threads or a Dask cluster; ``partitions`` is the in-process partitioned frame of local
runs; ``worker_plugin`` configures Dask workers; ``threads`` and ``failpoints`` are small helpers.
"""

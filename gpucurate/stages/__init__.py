"""Pipeline stages, one module each. A stage is a small class with one job and a ``run()``."""

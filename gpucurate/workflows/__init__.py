"""The commands a user runs, each a workflow over the stages: ``run`` (read -> stages -> write),
``ingest`` (incremental, with its persistent ``state``) and ``rethreshold`` (new thresholds from a run's
stored edges and ``runindex``)."""

"""Looking at results: ``report`` (report.html of a run), ``samples`` (pairs to label), ``calibrate``
(thresholds from labelled pairs) and ``evaluate`` (scores against ground truth)."""

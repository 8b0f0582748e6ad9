"""The report layer: what a reader sees of a run or a study.

:mod:`~testbed.reports.latency_report` draws CDFs and text tables,
:mod:`~testbed.reports.html` and :mod:`~testbed.reports.html_page` write the
self-contained HTML pages, :mod:`~testbed.reports.colours` gives each policy its colour
and :mod:`~testbed.reports.claims_index` gathers every report's verdicts. It reads the
analysis layer (:mod:`testbed.analysis`), never the other way round.
"""

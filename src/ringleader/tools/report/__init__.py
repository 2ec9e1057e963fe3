"""`ringleader report PATH`: one self-contained HTML page and PNG charts from what a job left.

Data flows one way: discover (which files below PATH are job output) -> the pure parsers
(jobinfo, metrics, timeline, autotune: text in, frozen dataclasses out) -> model (one Report
and its text summary) -> charts (matplotlib, Agg) and page (HTML text) -> cli (reading and
writing files, exit codes). Only load, charts and cli touch the file system.
"""

"""The run report: a run folder read back (``data``), rendered as HTML and Markdown that answer first, the
console summary a session prints, and the CSV exports (``render``: ``report.html``, ``README.md``,
``steps.csv``, ``records.csv``), with inline SVG plots (``plots``)."""

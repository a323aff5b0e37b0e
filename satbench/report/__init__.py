"""The run report: a run folder read back (``data``), rendered as HTML and Markdown (``render``), with plots."""

"""Grafana dashboards as code: one factory per panel, queries from ``core.promql``."""

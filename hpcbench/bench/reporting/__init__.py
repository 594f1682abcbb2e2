"""Reporting an analysis: report.md and report.html, their tables and figures."""

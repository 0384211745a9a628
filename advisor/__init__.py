"""Placement advisor: models, scoring, the HTTP API for the scheduler, and the trace-driven simulator."""

"""Trace-driven placement simulator (docs/design.md §7): what the advice is worth on published traces, against the usual
policies."""

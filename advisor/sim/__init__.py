"""Trace-driven placement simulator (DESIGN §7): what the advice is worth on published traces, against the usual
policies."""

"""Throughput, co-location interference and JCT predictors over LightGBM, their baselines, and the registry.

Serving code loads the promoted versions with `advisor.models.registry.load_promoted`.
"""

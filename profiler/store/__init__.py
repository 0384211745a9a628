"""The SQL store (SQLAlchemy 2 + Alembic): profiles, co-locations, executions, the model registry."""

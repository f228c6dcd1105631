"""A job's fate: what becomes of a job once one of its attempts ends (placeholder)."""

"""Runs the stages: the CLI, configuration, Ray jobs, scheduled retraining."""

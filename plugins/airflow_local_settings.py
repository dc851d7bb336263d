"""Airflow's local settings for this project: Airflow imports this module from the plugins folder (on its path)
in every process it starts. It holds the project's cluster policy only (:mod:`benchflow.hosts.edge`).

A policy registered through the ``airflow.policy`` entry point alone is never called for new task instances
(Airflow 3.3 marks the mutation hook as in use only when it finds this module), so the policy is named here.
"""

from __future__ import annotations

from benchflow.hosts.edge import task_instance_mutation_hook

__all__ = ["task_instance_mutation_hook"]

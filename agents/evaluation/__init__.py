"""The recall benchmark (``manage.py memory_eval``): does the memory make the agent remember?

* ``dataset``: seeded, reproducible users with multi-session histories and questions;
* ``configs``: the memory configurations compared (full context, session + pruned, + archive,
  + archive + core memory);
* ``runner``: ingests each history into real stores with real cleanups and the Dream Engine,
  then asks every question through ``Runtime.run_turn``; resumable;
* ``scoring``: normalized match on the planted value, an optional judge model;
* ``report``: the per-kind table, markdown and JSON.
"""

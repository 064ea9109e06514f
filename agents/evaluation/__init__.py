"""The recall benchmark (``manage.py memory_eval``): does the memory make the agent remember?

* ``dataset``: seeded, reproducible users with multi-session histories and questions;
* ``configs``: the memory configurations compared (full context, session + pruned, + archive,
  + archive + core memory);
* ``pipeline``: ingests one history into real stores with real cleanups and the Dream Engine,
  then asks one question through ``Runtime.run_turn``;
* ``runner``: every (user, configuration) pair through the pipeline, resumable;
* ``scoring``: normalized match on the planted value, an optional judge model;
* ``report``: the per-kind table, markdown and JSON.
"""

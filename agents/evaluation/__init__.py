"""The recall benchmark (``manage.py memory_eval``): does the memory bring back what was said?

* ``data``: dataset values (histories of dated sessions of turns, questions naming their
  evidence turns) and the ids turns are stored under; ``datasets`` picks one from ``--dataset``;
* ``generated`` (+ ``generated_facts``, ``generated_text``): the seeded dataset made of
  realistic short conversations; ``loaders``: LoCoMo and LongMemEval files;
* ``configs``: the memory configurations compared, the answering agent, the metered model;
* ``pipeline``: reads a history into real stores (cleanups, the Dream Engine,
  ``conversation_ended`` between conversations) and asks one question through the runtime;
* ``evidence``: where each evidence turn was when the question was answered (in context,
  reachable, per tier); ``scoring``, ``f1``, ``porter``, ``judges``: the answer scores;
* ``runner``: every (repeat, history, configuration), resumable; ``stats``: intervals and the
  paired bootstrap; ``report``, ``report_text``: JSON and markdown;
* ``results``, ``charts``, ``views``: the results page (``/evaluation/``).
"""

"""Context assembly: providers (core, archive, pruned), the governance lens, ContextAssembler.

``base`` holds the provider contract, ``assembler`` the entry point (``ContextAssembler``,
``default_pipeline``), ``window`` the cheap, tool-chain-legal messages window, ``governance``
the lens applied to the copy sent to the model, ``xml`` the escaping every section goes through.
"""

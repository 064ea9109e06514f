"""The scope editor: the staff page's state and saving, the scope tree for the API, line diffs."""

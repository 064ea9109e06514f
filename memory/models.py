"""Django models behind memory/stores/sql.py. Persistence only: no behaviour lives here."""

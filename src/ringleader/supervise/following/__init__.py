"""The worker as pure rules: its state (state.py), what it asks for (effects.py), its rules
(rules.py) and the table that decides every (phase, event) pair (table.py).
supervise/worker.py is the interpreter."""

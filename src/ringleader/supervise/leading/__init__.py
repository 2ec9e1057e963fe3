"""The leader as pure rules: its state (state.py), what it asks for (effects.py), the rules by
concern (startup, running, hang_watch, settling, restarts, telling) and the table that decides
every (phase, event) pair (table.py). supervise/leader.py is the interpreter."""

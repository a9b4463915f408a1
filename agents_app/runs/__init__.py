"""Runs as callers see them: start, resume, retry, interrupt and abort (`services`), beginning
and continuing a run (`launch`), the primitives control shares (`control`), results submitted to
a suspended run, and the tasks sent to the workers (`dispatch`, by name, so nothing here imports
the runtime)."""

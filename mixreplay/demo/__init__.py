"""The ``mixreplay demo``: SAC with and without offline data on MountainCarContinuous.

Not part of the core API (and it needs ``pip install "mixreplay[demo]"``):

- :mod:`~mixreplay.demo.sac`: a small SAC/RLPD learner that samples from any mixreplay buffer;
- :mod:`~mixreplay.demo.data`: the scripted expert, written as a Minari dataset on first use;
- :mod:`~mixreplay.demo.experiment`: one run (arm, seed) of online-only, mixed or annealed replay;
- :mod:`~mixreplay.demo.runner`: many runs in parallel worker processes;
- :mod:`~mixreplay.demo.report`: ``results.csv``, ``curves.png`` and the summary table;
- :mod:`~mixreplay.demo.cli`: the command (``mixreplay demo`` / ``python -m mixreplay.demo``).
"""

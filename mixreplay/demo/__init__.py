"""The ``mixreplay demo``: SAC with and without offline data on MountainCarContinuous.

``mixreplay demo --task halfcheetah`` is the MuJoCo benchmark of when offline data
helps and which schedule to pick (``pip install "mixreplay[mujoco]"``).

Not part of the core API (and it needs ``pip install "mixreplay[demo]"``):

- :mod:`~mixreplay.demo.tasks`: the tasks (environment, datasets, arms, run sizes);
- :mod:`~mixreplay.demo.sac`: a small SAC/RLPD learner that samples from any mixreplay buffer;
- :mod:`~mixreplay.demo.data`: the scripted expert, written as a Minari dataset on first use;
- :mod:`~mixreplay.demo.policy_data`: HalfCheetah datasets of chosen quality, from snapshots
  of one SAC run;
- :mod:`~mixreplay.demo.envs`: ``gym.make`` with MuJoCo's warnings sent to logging;
- :mod:`~mixreplay.demo.experiment`: one run (arm, seed) of online-only, mixed, annealed,
  proportional or return-gated replay;
- :mod:`~mixreplay.demo.runner`: many runs in parallel worker processes;
- :mod:`~mixreplay.demo.report`: ``results.csv``, ``curves.png`` and the summary tables;
- :mod:`~mixreplay.demo.cli`: the command (``mixreplay demo`` / ``python -m mixreplay.demo``).
"""

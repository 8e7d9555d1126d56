"""The agent: an IMPALA actor-learner in plain PyTorch (torchbeast monobeast's design).

Two sides, and what both use:

* :mod:`agents.acting` — stepping envs with the policy: the transport interface, the worker
  processes, actor mode (a CPU copy of the policy per process), server mode (env workers and a
  batched inference loop) and the Ray backend (actor hosts across a cluster).
* :mod:`agents.learning` — learning from the unrolls: V-trace, the IMPALA learner and its
  training loop, the update step and checkpoints shared with the supervised trainer, logging.
* Shared: :mod:`agents.run_config` (every config section, and the model a config builds),
  :mod:`agents.network` and :mod:`agents.resnet` (the agent network), :mod:`agents.config`
  (the typed-config machinery), :mod:`agents.files` (atomic writes), :mod:`agents.errors`
  (one-line errors), :mod:`agents.atari_tables` (the papers' Atari scores).

Neither side imports the other's modules, except that the learner starts the acting side.
"""

"""The agent: an IMPALA actor-learner in plain PyTorch (torchbeast monobeast's design).

Two sides, and what both use:

* :mod:`agents.acting` — stepping envs with the policy: the transport interface, the worker
  processes, actor mode (a CPU copy of the policy per process), server mode (env workers and a
  batched inference loop) and the Ray backend (actor hosts across a cluster).
* :mod:`agents.learning` — learning from the unrolls: V-trace, the IMPALA learner and its
  training loop, the update step and checkpoints shared with the supervised trainer, logging.
* Shared: :mod:`agents.run_config` (the RL run's config tree and the model a config builds; each
  section lives beside the code that reads it), :mod:`agents.network` and :mod:`agents.resnet`
  (the agent network), :mod:`agents.config` (the typed-config machinery), :mod:`agents.files`
  (atomic writes), :mod:`agents.tables` (results tables), :mod:`agents.errors` (one-line
  errors), :mod:`agents.atari_tables` (the papers' Atari scores).

The acting side's modules never import the learning side's, except through the config tree
(:mod:`agents.run_config`, which a Ray actor host reads); the learner starts the acting side.
docs/architecture.md draws the whole layout.
"""

"""The learning side: the IMPALA learner (:mod:`.learner`, with V-trace in :mod:`.vtrace`), the
supervised trainer (:mod:`.supervised`), and what both use: the update step and resume
(:mod:`.training`), checkpoints (:mod:`.checkpoint`) and logs (:mod:`.logger`)."""

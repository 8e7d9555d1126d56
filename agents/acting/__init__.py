"""The acting side: stepping envs with the policy and handing unrolls to the learner
(:class:`agents.acting.transport.Transport`): actor mode (:mod:`.actor`), server mode
(:mod:`.inference`) and the Ray backend (:mod:`.ray_backend`), over worker processes and pipes
(:mod:`.workers`)."""

"""§5–6 (numpy only): chain decoders, relaxed min-sum and sampling, target grammar, unary estimators, the AOWS sampler, decisions, baselines."""

"""Which specialist answers a turn: the labelling rules (served_by, tools, keywords) and the learned router (rules,
then a probe on the base's hidden states). Below the data, the harnesses and the mixture, which all route with it."""

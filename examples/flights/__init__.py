"""A second example graph, of another shape than W1: one raw file a day fans out per carrier, then in per month."""

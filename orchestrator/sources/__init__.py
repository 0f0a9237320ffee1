"""Source datasets discovered by scanning a connector (issue 11): the spec, the grouping of items
into partitions, and the scanner thread that records observations and its cursor in the log."""

"""Source datasets discovered by scanning a connector: the spec, the assembly of items
into partitions, and the scanner thread that records observations and its cursor in the log."""

"""Delivery: the engine that sends the log's events to subscriptions' webhooks (docs/subscriptions.md).

Shards of a subscription (each a slice of its topic partitions) run in `up` and
in `partbuild deliver --shards ...`, any number of processes. `messages` turns an
event into the messages of a subscription (one per ordering key it touches,
filtered); `sender` posts one signed message to a webhook; `shard` is one shard's
step over the main topic and its retry queue; `deliverer` runs the shards of every
subscription this process serves.
"""

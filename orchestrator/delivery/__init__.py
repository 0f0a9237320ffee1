"""Webhook delivery (issue 12, seed 004): subscriptions' shards deliver the log's events.

`messages` turns an event into the messages of a subscription (one per ordering
group it touches, filtered); `sender` posts one signed message; `shard` is one
shard's loop over the main topic and its retry queue; `deliverer` runs the shards
of every subscription this process serves.
"""

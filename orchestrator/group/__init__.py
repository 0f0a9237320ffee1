"""Worker groups: orchestrators that share buckets through a leader (issue 10).

`membership`: joining, heartbeats, leaving, the live members and the reaper; the
leader is whoever holds the group's lock (`Group.leader_lock`).
"""

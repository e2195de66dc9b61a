#!/bin/bash
# test_netns_replica.sh with the newest replica altered after the cut: the new rank 0 skips it
# (checksum) and the job resumes from the next newest replica, still bit-identical.
REPLICA_CORRUPT=1 exec bash "$(dirname "$0")/test_netns_replica.sh"

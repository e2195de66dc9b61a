#!/bin/bash
# test_netns_ckpt_sharded.sh with a replacement node: after host 3 is cut, an agent with an
# empty directory takes its place; the job goes on with 3 hosts from the newest step complete on
# all shards, the newcomer's ranks taking their state from the other hosts' shards.
SHARDED_REPLACE=1 exec bash "$(dirname "$0")/test_netns_ckpt_sharded.sh"

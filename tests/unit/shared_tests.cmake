# Shared-GPU mode (issue 7, run time): task environments and the MPS cap; include()d from
# tests/unit/CMakeLists.txt.
muster_unit_test(test_agent_shared ${CMAKE_CURRENT_LIST_DIR}/test_agent_shared.c muster_agent)
# --numa-binding (issue 12): agent/numa.c's plan on fake sysfs trees.
muster_unit_test(test_agent_numa ${CMAKE_CURRENT_LIST_DIR}/test_agent_numa.c muster_agent)
# Process trees (issue 11 part 5): the cgroup v2 path helpers of agent/cgroup.c.
muster_unit_test(test_agent_cgroup ${CMAKE_CURRENT_LIST_DIR}/test_agent_cgroup.c muster_agent)

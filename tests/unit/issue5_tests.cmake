# Issue 5 unit tests (checkpoint registry, Slurm); include()d from tests/unit/CMakeLists.txt.
# Needs agent/ckpt.c + agent/ckpt_hash.c in muster_agent (linked to xxhash) and
# launcher/slurm.c in muster_launcher.
muster_unit_test(test_agent_ckpt ${CMAKE_CURRENT_LIST_DIR}/test_agent_ckpt.c muster_agent)
muster_unit_test(test_launcher_slurm ${CMAKE_CURRENT_LIST_DIR}/test_launcher_slurm.c
                 muster_launcher)

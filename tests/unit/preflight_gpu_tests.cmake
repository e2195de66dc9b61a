# Issue 6, GPU side: the pure-C arithmetic of muster-preflight (preflight/busbw.c); runs
# everywhere, no GPU needed. include()d from tests/unit/CMakeLists.txt.
include(${PROJECT_SOURCE_DIR}/preflight/busbw.cmake) # no-op when preflight/ already did
muster_unit_test(test_preflight_busbw ${CMAKE_CURRENT_LIST_DIR}/test_preflight_busbw.c muster_busbw)
# Issue 15: the slow-GPU rule (preflight/perf.c) and the NVML health rule (preflight/health.c).
muster_unit_test(test_preflight_health ${CMAKE_CURRENT_LIST_DIR}/test_preflight_health.c
                 muster_busbw)

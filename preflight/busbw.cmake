# muster_busbw: the pre-flight's pure-C arithmetic (preflight/busbw.c), used by muster-preflight
# (preflight/gpu) and its unit test. include()d from preflight/CMakeLists.txt, and by
# preflight/gpu and tests/unit/preflight_gpu_tests.cmake as a fallback; the guard makes repeated
# includes harmless.
include_guard(GLOBAL)
# perf.c (GPU throughput outliers), health.c (the NVML health rule) and p2p.c (the peer-to-peer
# matrix rule) are pure C too.
add_library(muster_busbw STATIC ${CMAKE_CURRENT_LIST_DIR}/busbw.c ${CMAKE_CURRENT_LIST_DIR}/perf.c
            ${CMAKE_CURRENT_LIST_DIR}/health.c ${CMAKE_CURRENT_LIST_DIR}/p2p.c)
target_include_directories(muster_busbw PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(muster_busbw PUBLIC m)

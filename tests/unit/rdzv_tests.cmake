# Rendezvous unit tests; include()d from tests/unit/CMakeLists.txt. One program per module:
# codec, round logic, server, handlers, KV store, HTTP port, limits, TLS (tls.c, conn.c), the
# per-source handshake limiter and a ClientHello flood, credentials (cred.c).
if(NOT TARGET PkgConfig::CMOCKA)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

foreach(name IN ITEMS message job server handler kv http limits tls hslimit flood cred local)
  add_executable(test_rdzv_${name} ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_${name}.c)
  target_link_libraries(test_rdzv_${name} PRIVATE muster_rdzv PkgConfig::CMOCKA)
  target_include_directories(test_rdzv_${name} PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
  add_test(NAME unit.test_rdzv_${name} COMMAND test_rdzv_${name})
  set_tests_properties(unit.test_rdzv_${name} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()

# Rendezvous unit tests; include()d from tests/unit/CMakeLists.txt.
if(NOT TARGET PkgConfig::CMOCKA)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

foreach(name IN ITEMS message job server handler kv http limits)
  add_executable(test_rdzv_${name} ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_${name}.c)
  target_link_libraries(test_rdzv_${name} PRIVATE muster_rdzv PkgConfig::CMOCKA)
  target_include_directories(test_rdzv_${name} PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
  add_test(NAME unit.test_rdzv_${name} COMMAND test_rdzv_${name})
  set_tests_properties(unit.test_rdzv_${name} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()

# TLS (rendezvous/tls.c, conn.c): its own stanza so the list above can grow independently.
add_executable(test_rdzv_tls ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_tls.c)
target_link_libraries(test_rdzv_tls PRIVATE muster_rdzv PkgConfig::CMOCKA)
target_include_directories(test_rdzv_tls PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
add_test(NAME unit.test_rdzv_tls COMMAND test_rdzv_tls)
set_tests_properties(unit.test_rdzv_tls PROPERTIES LABELS unit TIMEOUT 60)

# Handshake flood (issue 11): the per-source limiter, and a real server under a ClientHello flood.
foreach(name IN ITEMS hslimit flood)
  add_executable(test_rdzv_${name} ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_${name}.c)
  target_link_libraries(test_rdzv_${name} PRIVATE muster_rdzv PkgConfig::CMOCKA)
  target_include_directories(test_rdzv_${name} PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
  add_test(NAME unit.test_rdzv_${name} COMMAND test_rdzv_${name})
  set_tests_properties(unit.test_rdzv_${name} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()

# Credentials (rendezvous/cred.c, issue 11): forms, derivation, identities, permissions.
add_executable(test_rdzv_cred ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_cred.c)
target_link_libraries(test_rdzv_cred PRIVATE muster_rdzv PkgConfig::CMOCKA)
target_include_directories(test_rdzv_cred PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
add_test(NAME unit.test_rdzv_cred COMMAND test_rdzv_cred)
set_tests_properties(unit.test_rdzv_cred PROPERTIES LABELS unit TIMEOUT 60)

# Rendezvous client and libmuster unit tests; include()d from tests/unit/CMakeLists.txt.
if(NOT TARGET PkgConfig::CMOCKA)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

add_executable(test_rdzv_client ${CMAKE_CURRENT_LIST_DIR}/test_rdzv_client.c)
target_link_libraries(test_rdzv_client PRIVATE muster_rdzv PkgConfig::CMOCKA)
add_test(NAME unit.test_rdzv_client COMMAND test_rdzv_client)
set_tests_properties(unit.test_rdzv_client PROPERTIES LABELS unit TIMEOUT 60)

if(TARGET muster_client_shared)
  # The shared library hides the codec's symbols, so the test's server (muster_rdzv) and the
  # library's copy of message.c do not collide.
  add_executable(test_libmuster ${CMAKE_CURRENT_LIST_DIR}/test_libmuster.c)
  target_link_libraries(test_libmuster PRIVATE muster_client_shared muster_rdzv
    PkgConfig::CMOCKA)
  add_test(NAME unit.test_libmuster COMMAND test_libmuster)
  set_tests_properties(unit.test_libmuster PROPERTIES LABELS unit TIMEOUT 60)
endif()

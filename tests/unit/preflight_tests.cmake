# Issue 6 pre-flight unit tests; include()d from tests/unit/CMakeLists.txt.
muster_unit_test(test_preflight_inventory ${CMAKE_CURRENT_LIST_DIR}/test_preflight_inventory.c
                 muster_pfnode)

# common/ (DESIGN.md "Layers"): ids, escaping, safe files; include()d from
# tests/unit/CMakeLists.txt.
muster_unit_test(test_common_ids ${CMAKE_CURRENT_LIST_DIR}/test_common_ids.c muster_common)
muster_unit_test(test_common_escape ${CMAKE_CURRENT_LIST_DIR}/test_common_escape.c muster_common)
muster_unit_test(test_common_safefile ${CMAKE_CURRENT_LIST_DIR}/test_common_safefile.c muster_common)
muster_unit_test(test_common_log ${CMAKE_CURRENT_LIST_DIR}/test_common_log.c muster_common)
muster_unit_test(test_common_proc ${CMAKE_CURRENT_LIST_DIR}/test_common_proc.c muster_common)
muster_unit_test(test_common_json ${CMAKE_CURRENT_LIST_DIR}/test_common_json.c muster_common)

# Issue 7 (planner) unit tests; include()d from tests/unit/CMakeLists.txt.
# Needs launcher/plan.c in muster_launcher (jansson comes through muster_deps).
muster_unit_test(test_launcher_plan ${CMAKE_CURRENT_LIST_DIR}/test_launcher_plan.c muster_launcher)

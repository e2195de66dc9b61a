# Token files and secrets in memory (issue 11 §4); include()d from tests/unit/CMakeLists.txt.
muster_unit_test(test_launcher_token ${CMAKE_CURRENT_LIST_DIR}/test_launcher_token.c muster_launcher)
muster_unit_test(test_launcher_secret ${CMAKE_CURRENT_LIST_DIR}/test_launcher_secret.c
                 muster_launcher)

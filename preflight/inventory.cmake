target_sources(muster_pfnode PRIVATE ${CMAKE_CURRENT_LIST_DIR}/inventory.c)

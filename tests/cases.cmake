# Registers the test cases of tests/cases.list (the one list; its header says the format).
#
#   muster_cases(SUITE)         registers every line named SUITE.* in the current directory and
#                               fails the configure when a file of SUITE has no line, or a line
#                               names a file that is not there
#
# A line's labels become ctest LABELS (with the suite's name); `torch` and `heavy` also claim
# CPU slots and `heavy` the lock muster_cpu_heavy (tests/cases.list says how). Everything a case
# needs beyond its line comes from its suite, the same for all.
set(MUSTER_CASES_LIST ${CMAKE_CURRENT_LIST_DIR}/cases.list)
set(MUSTER_CASE_LABELS light torch netns slurm gpu heavy san-skip)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${MUSTER_CASES_LIST})

# The built tools the scripts run (tests/peers/, bench/), and where cached references go.
set(MUSTER_CASE_TOOLS_ENV
    "RDZV_POKE=$<TARGET_FILE:rdzv_poke>" "RDZV_KVFLOOD=$<TARGET_FILE:rdzv_kvflood>"
    "SILENT_CONNS=$<TARGET_FILE:silent_conns>" "FAKE_NVML=$<TARGET_FILE:fake_nvml>"
    "MUSTER_CACHE=${PROJECT_BINARY_DIR}/tests/cache")

# The files of SUITE that must each have a line, relative to tests/.
function(muster__case_files suite out)
  if(suite STREQUAL "unit")
    file(GLOB files CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}
         ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/unit/test_*.c)
  elseif(suite STREQUAL "gpu")
    file(GLOB files CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}
         ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gpu/*.sh)
    list(REMOVE_ITEM files gpu/lib.sh)
  elseif(suite STREQUAL "style")
    set(files)
  else()
    file(GLOB files CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}
         ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${suite}/test_*.sh)
  endif()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

# One case: NAME FILE LABELS TIMEOUT [LINK...] (the fields of its line).
function(muster__case suite name file labels timeout)
  set(path ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${file})
  if(MUSTER_SANITIZE)
    set(name san.${name}) # the sanitizer tree's cases: unique, telling names
  endif()
  string(REPLACE "," ";" labels "${labels}")
  foreach(l IN LISTS labels)
    if(NOT l IN_LIST MUSTER_CASE_LABELS)
      message(FATAL_ERROR "tests/cases.list: ${name}: unknown label '${l}' (${MUSTER_CASE_LABELS})")
    endif()
  endforeach()
  if(suite STREQUAL "unit")
    get_filename_component(prog ${file} NAME_WE)
    foreach(lib IN LISTS ARGN)
      if(NOT lib MATCHES "^-" AND NOT TARGET ${lib})
        message(STATUS "${name}: not built (no ${lib} in this configuration)")
        return()
      endif()
    endforeach()
    add_executable(${prog} ${path})
    target_link_libraries(${prog} PRIVATE muster_test_harness ${ARGN})
    target_include_directories(${prog} PRIVATE ${PROJECT_SOURCE_DIR}/rendezvous)
    add_test(NAME ${name} COMMAND ${prog})
  elseif(suite STREQUAL "style")
    add_test(NAME ${name} COMMAND sh ${path} ${PROJECT_SOURCE_DIR})
  elseif(suite STREQUAL "gpu")
    # a GPU host's script: BUILD_DIR OUT_DIR; it exits 77 where nvidia-smi finds no GPU
    add_test(NAME ${name} COMMAND ${BASH_EXECUTABLE} ${path} ${PROJECT_BINARY_DIR}
             ${CMAKE_CURRENT_BINARY_DIR}/${name}.out)
  else()
    add_test(NAME ${name} COMMAND ${BASH_EXECUTABLE} ${path}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT
      "MUSTER_BIN=$<TARGET_FILE:muster>;MUSTER_SRC=${PROJECT_SOURCE_DIR};MUSTER_BUILD=${PROJECT_BINARY_DIR};${MUSTER_CASE_TOOLS_ENV}")
  endif()
  if(NOT suite STREQUAL "unit")
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  # ci: the cases tools/test.sh runs from this build: under the sanitizers every unit program and
  # every integration case but the san-skip ones; in the plain build the rest, and the unit
  # programs again (each integration case runs once, every unit program in both builds)
  set(sanitized FALSE)
  if(suite STREQUAL "integration" AND NOT "san-skip" IN_LIST labels)
    set(sanitized TRUE)
  endif()
  if(suite STREQUAL "unit" OR (MUSTER_SANITIZE AND sanitized) OR
     (NOT MUSTER_SANITIZE AND NOT sanitized))
    list(APPEND labels ci)
  endif()
  # COST: without the times of a previous run (CTestCostData.txt), ctest starts the cases with
  # the longest timeouts first, so that a long case does not start last
  set_tests_properties(${name} PROPERTIES LABELS "${suite};${labels}" TIMEOUT ${timeout}
                                          COST ${timeout})
  if(MUSTER_SANITIZE)
    # tools/test.sh builds this tree as the fixture's setup, beside the plain tree's first cases
    # (without that setup, as in a ctest of this tree alone, the requirement is void)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED muster_san_built)
  endif()
  # the two cores as two slots (tests/resources.json): a torch case takes one, a heavy case both
  # and the lock, which also holds where ctest runs without the slots
  if("heavy" IN_LIST labels)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK muster_cpu_heavy RESOURCE_GROUPS cpus:2)
  elseif("torch" IN_LIST labels)
    set_tests_properties(${name} PROPERTIES RESOURCE_GROUPS cpus:1)
  endif()
endfunction()

function(muster_cases suite)
  find_program(BASH_EXECUTABLE bash REQUIRED)
  file(STRINGS ${MUSTER_CASES_LIST} lines REGEX "^${suite}\\.")
  muster__case_files(${suite} want)
  set(have)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
    list(LENGTH fields n)
    if(n LESS 4)
      message(FATAL_ERROR "tests/cases.list: '${line}': NAME FILE LABELS TIMEOUT [LINK...]")
    endif()
    list(GET fields 1 file)
    if(NOT EXISTS ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${file})
      message(FATAL_ERROR "tests/cases.list: '${line}': there is no tests/${file}")
    endif()
    list(APPEND have ${file})
    muster__case(${suite} ${fields})
  endforeach()
  list(REMOVE_ITEM want ${have})
  if(want)
    message(FATAL_ERROR "tests/cases.list has no line for: ${want} (one line per case; "
                        "docs/ARCHITECTURE.md \"Adding a test\")")
  endif()
endfunction()

# What `cmake --install` puts next to the targets' own install() rules (libmuster/, launcher/,
# preflight/gpu/): libmuster's pkg-config file and CMake package, and the man page. Components:
# runtime (the muster package), lib (libmuster0), dev (libmuster-dev); see packaging.cmake.
include(CMakePackageConfigHelpers)

# muster.pc is written at install time with that install's prefix (cmake/muster_pc.cmake says
# why), so it is right under `cmake --install --prefix P`, DESTDIR and in the .deb alike.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "muster.pc: CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR must be "
                      "relative to the prefix")
endif()
install(CODE "
  set(MUSTER_PC_TEMPLATE \"${CMAKE_CURRENT_LIST_DIR}/muster.pc.in\")
  set(MUSTER_PC_WORKDIR \"${PROJECT_BINARY_DIR}/muster-pc\")
  set(MUSTER_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(MUSTER_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(MUSTER_PC_VERSION \"${PROJECT_VERSION}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/muster_pc.cmake\")" COMPONENT dev)

# find_package(Muster): muster::muster (shared) and muster::muster_static
set(MUSTER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Muster)
install(EXPORT MusterTargets NAMESPACE muster:: FILE MusterTargets.cmake
  DESTINATION ${MUSTER_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/MusterConfig.cmake.in
  ${PROJECT_BINARY_DIR}/MusterConfig.cmake INSTALL_DESTINATION ${MUSTER_CMAKE_DIR})
# 0.x: every minor release may change the API, so only the same minor is compatible
write_basic_package_version_file(${PROJECT_BINARY_DIR}/MusterConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/MusterConfig.cmake ${PROJECT_BINARY_DIR}/MusterConfigVersion.cmake
  DESTINATION ${MUSTER_CMAKE_DIR} COMPONENT dev)

# muster.1, written at build time from the binary's own --help texts (tools/gen-manpage.sh), so
# the man page cannot drift from the help. Compressed as Debian policy wants (man reads either).
find_program(GZIP_EXECUTABLE gzip REQUIRED)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/muster.1 ${PROJECT_BINARY_DIR}/muster.1.gz
  COMMAND sh ${PROJECT_SOURCE_DIR}/tools/gen-manpage.sh $<TARGET_FILE:muster> ${PROJECT_VERSION}
          ${PROJECT_BINARY_DIR}/muster.1
  COMMAND ${GZIP_EXECUTABLE} -9nf -k ${PROJECT_BINARY_DIR}/muster.1
  DEPENDS muster ${PROJECT_SOURCE_DIR}/tools/gen-manpage.sh
  COMMENT "Generating muster.1 from muster --help"
  VERBATIM)
add_custom_target(muster_manpage ALL DEPENDS ${PROJECT_BINARY_DIR}/muster.1.gz)
install(FILES ${PROJECT_BINARY_DIR}/muster.1.gz
  DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)

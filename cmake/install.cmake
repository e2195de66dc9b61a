# What `cmake --install` puts next to the targets' own install() rules (libmuster/, launcher/,
# preflight/gpu/): libmuster's pkg-config file and CMake package, and the man page. Components:
# runtime (the muster package), lib (libmuster0), dev (libmuster-dev); see packaging.cmake.
include(CMakePackageConfigHelpers)

# muster.pc finds its prefix from its own place (${pcfiledir}), so it stays right under
# `cmake --install --prefix P`, DESTDIR and a .deb alike. That needs a relative libdir.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  message(FATAL_ERROR "muster.pc: CMAKE_INSTALL_LIBDIR must be relative to the prefix")
endif()
file(RELATIVE_PATH MUSTER_PC_RELPREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" MUSTER_PC_RELPREFIX "${MUSTER_PC_RELPREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/muster.pc.in ${PROJECT_BINARY_DIR}/muster.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/muster.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

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

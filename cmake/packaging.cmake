# `cpack -G DEB` in the build folder makes three Debian packages from the install components
# (install.cmake):
#   muster         runtime: muster, muster-preflight (when built), muster.1
#   libmuster0     lib:     libmuster.so.0 (the shared client library)
#   libmuster-dev  dev:     muster.h, muster_version.h, libmuster.a, libmuster.so, muster.pc,
#                           the CMake package (MusterConfig.cmake)
# Library dependencies come from dpkg-shlibdeps (dpkg-dev; CPack also needs `file`).
# Each package holds /usr/share/doc/<package>/copyright and changelog.gz (cmake/debian/) and, where
# a lintian tag is knowingly kept, /usr/share/lintian/overrides/<package> with the reason;
# tests/integration/test_deb.sh runs lintian on all three.

# lintian checks that the address's host is a domain name (bogus-mail-host: "localhost" is not);
# the default is a placeholder under the reserved .invalid top-level domain (RFC 2606), which
# lintian accepts and no mail server will ever deliver to. Someone publishing the packages puts
# their own: -DMUSTER_PACKAGE_MAINTAINER="Name <address>".
set(MUSTER_PACKAGE_MAINTAINER "muster maintainers <maintainers@muster.invalid>" CACHE STRING
  "Maintainer field of the .deb packages (\"Name <address>\")")
set(CPACK_PACKAGE_NAME muster)
set(CPACK_PACKAGE_VENDOR "muster")
set(CPACK_PACKAGE_CONTACT "${MUSTER_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${MUSTER_PACKAGE_MAINTAINER}")
# one source for all three, so each names it (Source: muster) and their changelogs are one
set(CPACK_DEBIAN_PACKAGE_SOURCE muster)
# Debian policy 10.1: binaries and shared objects stripped (lintian: unstripped-binary-or-object);
# the build tree keeps its symbols for debugging
set(CPACK_STRIP_FILES ON)
# control files 0644, maintainer scripts 0755, whatever the source tree's modes are
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# no CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it before every package's own summary line
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL runtime lib dev)
set(CPACK_COMPONENT_DEV_DEPENDS lib)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME muster)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION utils)
# extended description lines stay under 80 columns (lintian: extended-description-line-too-long)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "distributed-training launcher\nmuster starts and supervises the workers of a training job on each node,\nwith torchrun's flags and environment, a TLS rendezvous server, restarts\nand pre-flight checks.")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libmuster0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# a shlibs file, so packages built against libmuster0 depend on it; only packages holding a
# library get one
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# The ldconfig trigger (lintian: lacks-ldconfig-trigger). CPack 3.25 also writes a postinst and a
# postrm that call ldconfig for any library under /usr/lib, with no switch to turn them off; they
# are redundant next to the trigger, and libmuster0's lintian overrides say so.
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/libmuster0/triggers)
set(CPACK_DEBIAN_LIB_DESCRIPTION
  "client library of the muster rendezvous server\nlibmuster gives training workers started by muster a key-value store\nwith waits and barriers, scoped to their job.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmuster-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# libmuster.a needs mbedTLS at link time (muster.pc's Libs.private)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libmbedtls-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "client library of the muster rendezvous server (development files)\nHeader, static library, pkg-config file (muster.pc) and CMake package\n(find_package(Muster)) of libmuster.")

# --- what every package holds for Debian: copyright, changelog, lintian overrides ----------------
# The changelog is written by hand (cmake/debian/changelog, Debian's format). The packages are
# native (version = the project's, no Debian revision), so its name is changelog.gz (policy 12.7),
# compressed with gzip -9n (no name or time stamp: the same bytes every build).
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/debian/changelog _changelog_top LIMIT_COUNT 1)
if(NOT _changelog_top MATCHES "^muster \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "cmake/debian/changelog: its first entry is '${_changelog_top}', not "
                      "version ${PROJECT_VERSION}: add an entry for this version")
endif()
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/debian/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/debian
  COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_CURRENT_LIST_DIR}/debian/changelog
          ${PROJECT_BINARY_DIR}/debian/changelog
  COMMAND ${GZIP_EXECUTABLE} -9nf ${PROJECT_BINARY_DIR}/debian/changelog
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/debian/changelog
  COMMENT "Compressing the Debian changelog"
  VERBATIM)
add_custom_target(muster_deb_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/debian/changelog.gz)
foreach(component runtime lib dev)
  string(TOUPPER ${component} _c)
  set(_pkg ${CPACK_DEBIAN_${_c}_PACKAGE_NAME})
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright ${PROJECT_BINARY_DIR}/debian/changelog.gz
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${_pkg} COMPONENT ${component})
  # only in the packages (and a `cmake --install --component`), not in a plain cmake --install;
  # muster's overrides are all about muster-preflight (lintian would call them unused without it)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/debian/${_pkg}.lintian-overrides AND
     (NOT component STREQUAL "runtime" OR TARGET muster-preflight))
    install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/${_pkg}.lintian-overrides
      DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides RENAME ${_pkg}
      COMPONENT ${component} EXCLUDE_FROM_ALL)
  endif()
endforeach()

include(CPack)

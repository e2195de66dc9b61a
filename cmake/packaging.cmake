# `cpack -G DEB` in the build folder makes three Debian packages from the install components
# (install.cmake):
#   muster         runtime: muster, muster-preflight (when built), muster.1
#   libmuster0     lib:     libmuster.so.0 (the shared client library)
#   libmuster-dev  dev:     muster.h, muster_version.h, libmuster.a, libmuster.so, muster.pc,
#                           the CMake package (MusterConfig.cmake)
# Library dependencies come from dpkg-shlibdeps (dpkg-dev; CPack also needs `file`).
set(CPACK_PACKAGE_NAME muster)
set(CPACK_PACKAGE_VENDOR "muster")
set(CPACK_PACKAGE_CONTACT "muster maintainers <muster@localhost>")
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
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "distributed-training launcher\nmuster starts and supervises the workers of a training job on each node, with\ntorchrun's flags and environment, a TLS rendezvous server, restarts and pre-flight checks.")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libmuster0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# a shlibs file, so packages built against libmuster0 depend on it (CPack adds the ldconfig
# postinst/postrm for the shared object by itself); only packages holding a library get one
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_LIB_DESCRIPTION
  "client library of the muster rendezvous server\nlibmuster gives training workers started by muster a key-value store with waits and\nbarriers, scoped to their job.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmuster-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# libmuster.a needs mbedTLS at link time (muster.pc's Libs.private)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libmbedtls-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "client library of the muster rendezvous server (development files)\nHeader, static library, pkg-config file (muster.pc) and CMake package\n(find_package(Muster)) of libmuster.")

include(CPack)

# Install-time half of muster.pc (install.cmake runs it through install(CODE)): writes muster.pc
# with the prefix this install really uses and installs it like install(FILES) would (DESTDIR,
# install_manifest.txt).
#
# Why at install time: the paths must be absolute (a ${pcfiledir}-relative prefix made
# `pkg-config --cflags` print -I/usr/lib/pkgconfig/../../include, which pkg-config cannot
# recognise as the system folder it filters out), and the prefix is only known now: the build is
# configured for /usr/local, the .deb packages install it under /usr (CPack sets
# CMAKE_INSTALL_PREFIX=/usr and DESTDIR to its staging folder), `cmake --install --prefix P`
# under P. CMAKE_INSTALL_FULL_LIBDIR would hold the configure-time prefix in all three cases.
#
# Input (set by the install(CODE) that includes this): MUSTER_PC_TEMPLATE, MUSTER_PC_WORKDIR,
# MUSTER_PC_LIBDIR, MUSTER_PC_INCLUDEDIR (both relative to the prefix), MUSTER_PC_VERSION.
string(REGEX REPLACE "(.)/+$" "\\1" MUSTER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
# one folder per destination, so two installs running at once (ctest -j: integration.install
# and integration.deb) never write each other's muster.pc
string(MD5 _muster_pc_key "$ENV{DESTDIR}|${MUSTER_PC_PREFIX}")
set(_muster_pc_dir "${MUSTER_PC_WORKDIR}/${_muster_pc_key}")
configure_file("${MUSTER_PC_TEMPLATE}" "${_muster_pc_dir}/muster.pc" @ONLY)
file(INSTALL DESTINATION "${MUSTER_PC_PREFIX}/${MUSTER_PC_LIBDIR}/pkgconfig" TYPE FILE
  FILES "${_muster_pc_dir}/muster.pc")

# Install and export: find_package(kdp CONFIG) gives kdp::kdp.
include(CMakePackageConfigHelpers)
set(KDP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kdp)

install(TARGETS kdp kdp_kokkos EXPORT kdpTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kdp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_BINARY_DIR}/include/kdp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kdpTargets NAMESPACE kdp:: DESTINATION ${KDP_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kdpConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kdpConfig.cmake
                              INSTALL_DESTINATION ${KDP_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kdpConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kdpConfig.cmake ${PROJECT_BINARY_DIR}/kdpConfigVersion.cmake
        DESTINATION ${KDP_INSTALL_CMAKEDIR})
